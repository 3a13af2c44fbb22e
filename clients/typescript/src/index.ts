// @canon/client: Canon's local-first client for browsers and Node.

export {Canon, backoffDelay} from './client.js';
export type {
  CanonOptions,
  MutateFns,
  Outcome,
  OutcomeEvent,
  PendingEvent,
  PendingMutation,
  Query,
  QueryResult,
  RejectedEvent,
  StateEvent,
  Status,
  SyncEvent,
  VersionEvent,
} from './client.js';
export {bundleHash} from './bundle.js';
export {CanonError} from './errors.js';
export {canonical, clone, equal, mergePatch, splice, type JSONObject, type JSONValue} from './json.js';
export {builtins, checkMutators, Limits, MutatorError, BUILTIN_NAMES} from './mutators.js';
export type {MutationInfo, Mutator, Mutators, Tx} from './mutators.js';
export {browserStorage, IndexedDBStorage, MemoryStorage, type Storage} from './storage.js';
export type {Item, ReadTx} from './view.js';
export type * as wire from './wire.js';
