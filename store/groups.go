package store

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canon-sync/canon/schemas"
)

// Client groups. The first principal that made a version with a client
// group in a project owns the group there, and a client belongs to the
// group of the first version that recorded one of its mutations (DESIGN.md:
// client binding); the store indexes both bindings and the group's
// clients, from the outcomes of the versions it applies, so that a
// restored sequencer (or one whose store was rebuilt from the changelog)
// decides the same and the read side can answer Replicache's
// lastMutationIDChanges.
//
//	0A group         org, project, group          → principal
//	0B group client  org, project, group, client  → (empty)
//	0C client        org, project, client         → group

type groupID struct{ org, project, group string }

type groupClientID struct{ org, project, group, client string }

type clientID struct{ org, project, client string }

func clientKey(p int32, org, project, client string) []byte {
	return appendString(projectPrefix(p, kindClient, org, project), client)
}

func groupKey(p int32, org, project, group string) []byte {
	return appendString(projectPrefix(p, kindGroup, org, project), group)
}

func appendGroupKey(b []byte, p int32, org, project, group string) []byte {
	return appendString(appendProjectPrefix(b, p, kindGroup, org, project), group)
}

func groupClientPrefix(p int32, org, project, group string) []byte {
	return appendString(projectPrefix(p, kindGroupClient, org, project), group)
}

func appendGroupClientKey(b []byte, p int32, org, project, group, client string) []byte {
	b = appendString(appendProjectPrefix(b, p, kindGroupClient, org, project), group)
	return appendString(b, client)
}

// bindGroup indexes an outcome's client group: the group's first principal
// becomes its owner, the client becomes one of its clients, and the group
// becomes the client's if the client has none yet. Outcomes without a
// principal (records written to Kafka by trusted tools rather than by the
// ingest) bind no owner, but their clients are indexed and bound.
func (a *applier) bindGroup(org, project string, m *schemas.Outcome) error {
	if m.ClientGroup == "" {
		return nil
	}
	if m.Principal != "" {
		gid := groupID{org, project, m.ClientGroup}
		if _, ok := a.groups[gid]; !ok {
			a.k2 = appendGroupKey(a.k2[:0], a.p, org, project, m.ClientGroup)
			owner, found, err := get(a.r, a.k2)
			if err != nil {
				return err
			}
			if !found {
				owner = []byte(m.Principal)
				if err := a.b.Set(a.k2, owner, nil); err != nil {
					return err
				}
			}
			a.groups[gid] = string(owner)
		}
	}
	if err := a.bindClient(org, project, m); err != nil {
		return err
	}
	cid := groupClientID{org, project, m.ClientGroup, m.Client}
	if _, ok := a.groupClients[cid]; ok {
		return nil
	}
	a.groupClients[cid] = struct{}{}
	a.k2 = appendGroupClientKey(a.k2[:0], a.p, org, project, m.ClientGroup, m.Client)
	return a.b.Set(a.k2, nil, nil)
}

// bindClient makes the outcome's group the client's, unless the client
// has one.
func (a *applier) bindClient(org, project string, m *schemas.Outcome) error {
	id := clientID{org, project, m.Client}
	if _, ok := a.clients[id]; ok {
		return nil
	}
	a.k2 = appendString(appendProjectPrefix(a.k2[:0], a.p, kindClient, org, project), m.Client)
	group, found, err := get(a.r, a.k2)
	if err != nil {
		return err
	}
	if !found {
		group = []byte(m.ClientGroup)
		if err := a.b.Set(a.k2, group, nil); err != nil {
			return err
		}
	}
	a.clients[id] = string(group)
	return nil
}

// ClientGroup implements model.Reader: the client group a client belongs
// to in a project; ok is false when no version recorded the client with
// a group. One point read.
func (s *Store) ClientGroup(org, project, client string) (group string, ok bool, err error) {
	v, found, err := get(s.db, clientKey(s.PartitionOf(org, project), org, project, client))
	if err != nil {
		return "", false, fmt.Errorf("read the client group of client %s of %s/%s: %w", client, org, project, err)
	}
	return string(v), found, nil
}

// GroupPrincipal implements model.Reader: the principal that owns a
// client group in a project; ok is false when the group is not bound.
// One point read.
func (s *Store) GroupPrincipal(org, project, group string) (principal string, ok bool, err error) {
	v, found, err := get(s.db, groupKey(s.PartitionOf(org, project), org, project, group))
	if err != nil {
		return "", false, fmt.Errorf("read the owner of client group %s of %s/%s: %w", group, org, project, err)
	}
	return string(v), found, nil
}

// GroupClients returns the clients of a client group that have a last id
// on the branch, with that id: Replicache's lastMutationIDChanges. A scan
// of the group's clients, then a point read per client.
func (s *Store) GroupClients(org, project, branch, group string) (map[string]uint64, error) {
	p := s.PartitionOf(org, project)
	prefix := groupClientPrefix(p, org, project, group)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, wrapQuery("client group "+group, org, project, branch, err)
	}
	var clients []string
	for it.First(); it.Valid(); it.Next() {
		client, _, err := decodeString(it.Key()[len(prefix):])
		if err != nil {
			_ = it.Close()
			return nil, wrapQuery("client group "+group, org, project, branch, err)
		}
		clients = append(clients, client)
	}
	if err := it.Close(); err != nil {
		return nil, wrapQuery("client group "+group, org, project, branch, err)
	}
	out := make(map[string]uint64, len(clients))
	for _, c := range clients {
		id, err := s.LastID(org, project, branch, c)
		if err != nil {
			return nil, err
		}
		if id > 0 {
			out[c] = id
		}
	}
	return out, nil
}
