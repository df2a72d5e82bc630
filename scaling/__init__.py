"""The scaling workload: sampling-based search with self-verification (Verification@k).

config and experiment (the workload's loop), sampling (the stored run), verdicts (the model's
own checks), curves (replay of each strategy over a stored pool), report, arith_problems (the
demo data), verifier_adapter (the trained verifier's recipe). What the served search shares with
it lives in search/: the ScoredPool (search/scored_pool.py), the strategies (search/strategies/)
and the one Verification@k implementation (search/selection.py).
"""
