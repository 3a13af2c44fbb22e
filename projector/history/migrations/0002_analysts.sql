-- History for analysts, part 2: commit times, error codes, the lineage
-- of rebased and replayed mutations, item bodies and large args, the
-- ancestry of branches, and time columns in UTC whatever the server's
-- zone. ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS: Migrate skips an
-- ADD COLUMN whose column exists, so each statement may run again.

ALTER TABLE {db}.versions ADD COLUMN decided_at DateTime('UTC');
ALTER TABLE {db}.versions ADD COLUMN decided_ms UInt64;
ALTER TABLE {db}.versions ADD COLUMN committed_at DateTime('UTC');
ALTER TABLE {db}.versions ADD COLUMN committed_ms UInt64;

ALTER TABLE {db}.mutations ADD COLUMN error_code String;
ALTER TABLE {db}.mutations ADD COLUMN decided_at DateTime('UTC');
ALTER TABLE {db}.mutations ADD COLUMN decided_ms UInt64;
ALTER TABLE {db}.mutations ADD COLUMN committed_at DateTime('UTC');
ALTER TABLE {db}.mutations ADD COLUMN committed_ms UInt64;
ALTER TABLE {db}.mutations ADD COLUMN job_kind String;
ALTER TABLE {db}.mutations ADD COLUMN job_principal String;
ALTER TABLE {db}.mutations ADD COLUMN job_at DateTime('UTC');
ALTER TABLE {db}.mutations ADD COLUMN job_ms UInt64;
ALTER TABLE {db}.mutations ADD COLUMN origin_project String;
ALTER TABLE {db}.mutations ADD COLUMN origin_branch String;
ALTER TABLE {db}.mutations ADD COLUMN origin_version UInt64;
ALTER TABLE {db}.mutations ADD COLUMN origin_client String;
ALTER TABLE {db}.mutations ADD COLUMN origin_mutation_id UInt64;

ALTER TABLE {db}.mutations MODIFY COLUMN client_ts DateTime('UTC');
ALTER TABLE {db}.mutations MODIFY COLUMN received_at DateTime('UTC');
-- Partition key columns: ClickHouse 18.16 refuses to alter them (Code 44),
-- and Migrate then leaves them as they are (see docs/analytics.md).
ALTER TABLE {db}.versions MODIFY COLUMN ts DateTime('UTC');
ALTER TABLE {db}.mutations MODIFY COLUMN applied_at DateTime('UTC');
ALTER TABLE {db}.item_changes MODIFY COLUMN ts DateTime('UTC');
ALTER TABLE {db}.scalar_changes MODIFY COLUMN ts DateTime('UTC');

-- Item bodies, one row per distinct body of a project: canonical JSON.
CREATE TABLE IF NOT EXISTS {db}.bodies (
    org String,
    project String,
    hash String,
    size UInt64,
    body String,
    kafka_offset Int64
) ENGINE = ReplacingMergeTree(kafka_offset)
ORDER BY (org, project, hash);

-- The chunks of bodies and large args, by hash within a project: what the
-- projector reassembles a body or args from when their chunks came in an
-- earlier batch.
CREATE TABLE IF NOT EXISTS {db}.chunks (
    org String,
    project String,
    hash String,
    size UInt64,
    data String,
    kafka_offset Int64
) ENGINE = ReplacingMergeTree(kafka_offset)
ORDER BY (org, project, hash);

-- The ancestry of each branch: the branch itself (depth 0) and every
-- branch its state comes from, with the last version of it the branch
-- sees (upto).
CREATE TABLE IF NOT EXISTS {db}.branches (
    org String,
    project String,
    branch String,
    ancestor String,
    depth UInt32,
    upto UInt64,
    kafka_offset Int64
) ENGINE = ReplacingMergeTree(kafka_offset)
ORDER BY (org, project, branch, ancestor);
