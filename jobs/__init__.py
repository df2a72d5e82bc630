"""What every job shares, below the job files in ray_jobs/: the runner (CLI, checks, lease,
Ray, run dir, status), the cluster checks, clean stops on SIGTERM/SIGINT, `ratchet serve`'s
server on Ray, and `ratchet runs`."""
