// @canon/client/react: hooks over a Canon client.

import {useCallback, useRef, useSyncExternalStore} from 'react';
import type {Canon, Query, QueryResult} from './client.js';
import type {Mutators} from './mutators.js';

/**
 * useQuery subscribes the component to a query of the client's local view
 * (optimistic: pending mutations included). It re-renders only when the
 * result changed. deps are what the query closes over, as for useMemo.
 */
export function useQuery<Q extends Query<unknown>, M extends Mutators = Mutators>(canon: Canon<M>, query: Q, deps: readonly unknown[] = []): QueryResult<Q> {
  type T = QueryResult<Q>;
  const value = useRef<{v: T} | undefined>(undefined);
  const q = useRef(query);
  q.current = query;
  const subscribe = useCallback(
    (onChange: () => void) =>
      canon.subscribe(q.current, v => {
        value.current = {v};
        onChange();
      }),
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [canon, ...deps],
  );
  const get = () => {
    if (value.current === undefined) {
      value.current = {v: canon.query(q.current)};
    }
    return value.current.v;
  };
  return useSyncExternalStore(subscribe, get, get);
}

/** useVersion is the canonical version the client's view is at. */
export function useVersion<M extends Mutators>(canon: Canon<M>): number {
  return useQuery(canon, (tx: {version: number}) => tx.version);
}
