"""TPO (thought preference optimization): thought prompts and parsing, length-controlled
preference pairs, the TpoLoop, and its report. The job wiring is ray_jobs/tpo.py."""
