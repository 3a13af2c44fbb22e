-- History, part 3: the hash of the mutator bundle that decided each
-- version and mutation (empty for the built-in and Go mutators). Migrate
-- skips an ADD COLUMN whose column exists, so each statement may run again.

ALTER TABLE {db}.versions ADD COLUMN bundle String;
ALTER TABLE {db}.mutations ADD COLUMN bundle String;
