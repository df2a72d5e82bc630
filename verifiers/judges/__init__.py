"""Judges that score a response to an instruction and never see a thought.

Every judge takes `JudgeItem`s (instruction, response, reference): there is no field a
thought could travel in, and the TPO loop builds items from the parsed response only.
A judge's bad output (an unparsable verdict, a NaN score) comes back as a `Verdict` with
ok=False and the reason, never dropped.
"""

from verifiers.judges.base import Judge, JudgeItem, Verdict
from verifiers.judges.registry import JUDGES, make_judge

__all__ = ["JUDGES", "Judge", "JudgeItem", "Verdict", "make_judge"]
