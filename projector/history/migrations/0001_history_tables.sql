-- Canon's history tables. Every table is a ReplacingMergeTree whose ORDER BY
-- is the row's identity, so that rows the projector delivers again after a
-- crash collapse into one. Query them with FINAL (see docs/analytics.md).

CREATE TABLE IF NOT EXISTS {db}.versions (
    org String,
    project String,
    branch String,
    version UInt64,
    parent UInt64,
    base_branch String,
    base_version UInt64,
    ts DateTime,
    ts_ms UInt64,
    scalars String,
    state_hash String,
    items_changed UInt32,
    mutations UInt32,
    mutations_applied UInt32,
    mutations_error UInt32,
    new_chunks UInt32,
    new_bytes UInt64,
    source_partition Int32,
    source_offset Int64,
    kafka_partition Int32,
    kafka_offset Int64
) ENGINE = ReplacingMergeTree(kafka_offset)
PARTITION BY toYYYYMM(ts)
ORDER BY (org, project, branch, version);

CREATE TABLE IF NOT EXISTS {db}.mutations (
    org String,
    project String,
    branch String,
    version UInt64,
    seq UInt32,
    client_group String,
    client String,
    mutation_id UInt64,
    name String,
    args String,
    args_hash String,
    args_size UInt64,
    status String,
    error String,
    principal String,
    client_ts DateTime,
    client_ts_ms UInt64,
    received_at DateTime,
    received_ms UInt64,
    applied_at DateTime,
    applied_ms UInt64,
    source_partition Int32,
    source_offset Int64,
    kafka_offset Int64
) ENGINE = ReplacingMergeTree(kafka_offset)
PARTITION BY toYYYYMM(applied_at)
ORDER BY (org, project, branch, version, seq);

CREATE TABLE IF NOT EXISTS {db}.item_changes (
    org String,
    project String,
    branch String,
    version UInt64,
    collection String,
    item_id String,
    op String,
    meta String,
    hash String,
    size UInt64,
    chunks UInt32,
    new_chunks UInt32,
    new_bytes UInt64,
    ts DateTime,
    ts_ms UInt64,
    kafka_offset Int64
) ENGINE = ReplacingMergeTree(kafka_offset)
PARTITION BY toYYYYMM(ts)
ORDER BY (org, project, branch, collection, item_id, version);

CREATE TABLE IF NOT EXISTS {db}.scalar_changes (
    org String,
    project String,
    branch String,
    version UInt64,
    name String,
    op String,
    value String,
    previous String,
    ts DateTime,
    ts_ms UInt64,
    kafka_offset Int64
) ENGINE = ReplacingMergeTree(kafka_offset)
PARTITION BY toYYYYMM(ts)
ORDER BY (org, project, branch, name, version);

-- Activity per client per day. A materialized view sees every insert,
-- redelivered rows included, so it keeps only aggregates that a duplicate
-- does not change: exact sets of mutation identities, minimums, maximums.
CREATE TABLE IF NOT EXISTS {db}.client_activity_daily (
    day Date,
    org String,
    project String,
    client_group String,
    client String,
    mutations AggregateFunction(uniqExact, String, UInt64),
    applied AggregateFunction(uniqExactIf, String, UInt64, UInt8),
    errors AggregateFunction(uniqExactIf, String, UInt64, UInt8),
    versions AggregateFunction(uniqExact, String, UInt64),
    first_ms AggregateFunction(min, UInt64),
    last_ms AggregateFunction(max, UInt64)
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (day, org, project, client_group, client);

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.client_activity_daily_mv
TO {db}.client_activity_daily
AS SELECT
    toDate(applied_at) AS day,
    org,
    project,
    client_group,
    client,
    uniqExactState(branch, mutation_id) AS mutations,
    uniqExactIfState(branch, mutation_id, status = 'applied') AS applied,
    uniqExactIfState(branch, mutation_id, status = 'error') AS errors,
    uniqExactState(branch, version) AS versions,
    minState(applied_ms) AS first_ms,
    maxState(applied_ms) AS last_ms
FROM {db}.mutations
GROUP BY day, org, project, client_group, client;
