"""Whole-system drills on this machine, each run from a thin command line in scripts/:

chaos (`make chaos`): each job killed at chosen points and restarted, compared with an
uninterrupted run (its small runs and their comparison: chaos_jobs); cluster_demo (`make
cluster-demo`): the cluster recipe on a multi-node Ray cluster on this machine (local_cluster),
a worker node lost mid-run; secret_scan: where a secret must never be (Ray's GCS, its job
records, the logs); demo_real (`make demo-real`): every workload on the real pretrained model; mutation (`make
mutate`): the tests' kill rate of one-line slips in each pure-logic module.
"""
