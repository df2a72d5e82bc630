"""The scaling workload: sampling-based search with self-verification (Verification@k).

selection (the one Verification@k implementation, offline and live), strategies and curves
(replay over a stored pool), pool (ScoredPool), sampling (the stored run), service_search
(the live path behind `ratchet serve`'s `search` extension), arith_problems (the demo data).
"""
