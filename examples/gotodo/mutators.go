package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/canon-sync/canon/model"
)

// Collection holds the todos, one item each, keyed by the todo's id.
const Collection = "todos"

// Todo is the body of a todo item.
type Todo struct {
	Title string `json:"title"`
	Done  bool   `json:"done"`
	// Order sorts the list; todo.move sets it.
	Order float64 `json:"order"`
	// Created is when todo.create was decided (the mutation's log time,
	// milliseconds since the epoch), never the client's clock.
	Created int64 `json:"created"`
}

// Register adds the todo mutators to r (cli.Options.Mutators).
func Register(r *model.Registry) error {
	for name, m := range map[string]model.Mutator{
		"todo.create": create,
		"todo.toggle": toggle,
		"todo.rename": rename,
		"todo.move":   move,
	} {
		if err := r.Register(name, m); err != nil {
			return err
		}
	}
	return nil
}

type args struct {
	ID    string   `json:"id"`
	Title *string  `json:"title"`
	From  *string  `json:"from"`
	Order *float64 `json:"order"`
}

func parse(raw json.RawMessage) (args, error) {
	var a args
	if err := json.Unmarshal(raw, &a); err != nil {
		return a, fmt.Errorf("args: %w", err)
	}
	if a.ID == "" {
		return a, errors.New(`args: "id" is required`)
	}
	return a, nil
}

// create adds a todo: {"id", "title", "order"?}. Creating an id that
// exists is an error, so two clients that picked the same id learn it.
func create(tx model.Tx, raw json.RawMessage) error {
	a, err := parse(raw)
	if err != nil {
		return err
	}
	if a.Title == nil || *a.Title == "" {
		return errors.New(`args: "title" is required`)
	}
	if _, err := tx.Get(Collection, a.ID); err == nil {
		return fmt.Errorf("todo %q exists already", a.ID)
	} else if !errors.Is(err, model.ErrNotFound) {
		return err
	}
	t := Todo{Title: *a.Title, Created: tx.Now().UnixMilli()}
	if a.Order != nil {
		t.Order = *a.Order
	}
	return put(tx, a.ID, t)
}

// toggle flips a todo's done flag: {"id"}. Toggles commute in pairs, so
// two clients toggling at once leave it as it was, as both saw.
func toggle(tx model.Tx, raw json.RawMessage) error {
	a, err := parse(raw)
	if err != nil {
		return err
	}
	t, err := get(tx, a.ID)
	if err != nil {
		return err
	}
	t.Done = !t.Done
	return put(tx, a.ID, t)
}

// rename retitles a todo: {"id", "title", "from"}. The conflict rule:
// "from" is the title the client saw; when another rename landed first,
// the title is no longer "from" and this rename is refused with the
// title that won, rather than silently overwriting it.
func rename(tx model.Tx, raw json.RawMessage) error {
	a, err := parse(raw)
	if err != nil {
		return err
	}
	if a.Title == nil || *a.Title == "" || a.From == nil {
		return errors.New(`args: "title" and "from" (the title the client saw) are required`)
	}
	t, err := get(tx, a.ID)
	if err != nil {
		return err
	}
	if t.Title != *a.From {
		return fmt.Errorf("todo %q was renamed to %q meanwhile; rename from that", a.ID, t.Title)
	}
	t.Title = *a.Title
	return put(tx, a.ID, t)
}

// move sets a todo's place in the list: {"id", "order"}.
func move(tx model.Tx, raw json.RawMessage) error {
	a, err := parse(raw)
	if err != nil {
		return err
	}
	if a.Order == nil {
		return errors.New(`args: "order" is required`)
	}
	t, err := get(tx, a.ID)
	if err != nil {
		return err
	}
	t.Order = *a.Order
	return put(tx, a.ID, t)
}

func get(tx model.Tx, id string) (Todo, error) {
	var t Todo
	it, err := tx.Get(Collection, id)
	if errors.Is(err, model.ErrNotFound) {
		return t, fmt.Errorf("no todo %q: create it first", id)
	}
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(it.Data, &t); err != nil {
		return t, fmt.Errorf("todo %q: %w", id, err)
	}
	return t, nil
}

func put(tx model.Tx, id string, t Todo) error {
	data, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return tx.Put(Collection, id, model.Item{Data: data})
}
