"""The TPO loop: sample -> judge -> pairs -> train -> publish -> reload -> measure, per arm.

    loop = TpoLoop(cfg, state=TpoState(...), models=store.models(exp), sampler=pool, judge=judge, train=fn)
    summary = await loop.run()

Two arms share every step and budget: "thought" (the thought prompt; the judge sees the
parsed response) and "direct" (the baseline: the whole completion is the response). The
sampler is anything with `generate(prompts, params)` and `async switch(version, weights)` (the
SamplerPool, or a stub in tests); `train(rows, start, arm, iteration)` returns a finished
checkpoint dir, metrics, and the trained weights in Ray's object store (an ObjectRef) or None
(the job runs TRL's DPO as a Ray task). A trained version's weights are kept until the
samplers first switch to it (sampler.weight_sync: from memory), then dropped: with the
baseline arm, the thought arm's wait in the object store while the direct arm trains. Every phase is kept in
Redis (thinking.state), so a restarted run draws only what is missing. Sampling, judging
and measuring show progress (common.progress); each iteration's figures go to the tracker.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from common import fmt
from common.faults import CannotContinue
from common.progress import progress
from common.sampling import Completion, Prompt, SamplingParams
from common.tracking import Tracker
from search.pool import Switch
from store.models import file_hashes, relocated
from thinking.config import TpoConfig
from thinking.pairs import Group, Sample, build_pairs, choose_rho, no_rows_reason, trl_rows
from thinking.prompts import DirectPrompt, ThoughtPrompt
from thinking.state import TpoState
from verifiers.judges import Judge, JudgeItem

ARMS = ("thought", "direct")
log = logging.getLogger(__name__)


class Sampler(Protocol):
    async def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]: ...

    async def switch(self, version: Any, weights: Any = None) -> Switch: ...


Train = Callable[[list[dict[str, Any]], Any, str, int], Awaitable[tuple[str, dict[str, Any], Any]]]


def load_instructions(source: str, n: int, seed: int) -> list[dict[str, str]]:
    module, _, name = source.partition(":")
    if not name:
        raise ValueError(f"instructions={source!r} must be `module:function`")
    rows = getattr(importlib.import_module(module), name)(n, seed)
    for r in rows:
        if "id" not in r or "instruction" not in r:
            raise ValueError(f"instructions {source!r} returned a row without 'id' or 'instruction': {r!r}")
    return rows


def step_line(arm: str, entry: dict[str, Any], previous: dict[str, Any] | None) -> str:
    """One log line for an arm's measured iteration: its figures rounded, each with its change
    since the iteration before (what a reader of the run wants to know)."""
    parts = []
    for name, label in (("accuracy", "accuracy"), ("score", "score"), ("win_rate_vs_seed", "win rate vs seed"),
                        ("win_rate_vs_direct", "vs direct"), ("unparsable_rate", "unparsable")):
        value, was = entry.get(name), (previous or {}).get(name)
        if name == "score" and value == entry.get("accuracy"):
            continue  # a programmatic judge's score is the accuracy: said once
        if value is not None:
            parts.append(f"{label} {fmt.num(value)}" + (f" ({fmt.delta(value - was)})" if was is not None else ""))
    return f"{arm} iteration {entry['iteration']} ({entry['model_version']}): " + ", ".join(parts)


def judge_items(instructions: list[dict[str, str]], groups: list[list[Sample]]) -> list[JudgeItem]:
    """The judge's view: instruction, parsed response (empty when unparsable), reference. Never a thought."""
    return [JudgeItem(instruction=ins["instruction"], response=s.response, reference=ins.get("reference"),
                      group=ins["id"]) for ins, samples in zip(instructions, groups, strict=True) for s in samples]


class TpoLoop:
    def __init__(self, cfg: TpoConfig, *, state: TpoState, models: Any, sampler: Sampler, judge: Judge,
                 train: Train, seed_checkpoint: str | None = None, progress: bool = True,
                 tracker: Tracker | None = None):
        self.cfg, self.state, self.models, self.sampler, self.scorer, self.train_fn = (
            cfg, state, models, sampler, judge, train)
        self.tracker = tracker or Tracker({})
        self.prompts = {"thought": ThoughtPrompt(cfg.prompt), "direct": DirectPrompt(cfg.direct_prompt)}
        self.arms = ARMS if cfg.baseline else ("thought",)
        self.progress = progress
        self.loaded: str | None = None
        self.weights: dict[str, Any] = {}  # version -> its trained weights' ObjectRef, until the first switch to it
        self.switches: dict[str, Switch] = {}  # version -> the first switch to it (its path and seconds)
        self.seed_checkpoint = seed_checkpoint or cfg.model.checkpoint
        self._seed: Any = None  # seed_version(), once found
        self.comparative = getattr(judge, "comparative", False)  # scores mean something only within a group

    def bar(self, total: int, desc: str, initial: int = 0, unit: str = "ins"):
        return progress(total=total, initial=initial, desc=desc, unit=unit, disable=not self.progress)

    # -- versions -------------------------------------------------------------------------
    def seed_version(self) -> Any:
        """The experiment's seed version (published on a fresh experiment), looked up once per run:
        found under a new path, its files were hashed to tell."""
        if self._seed is None:
            self._seed = self._find_seed()
        return self._seed

    def _find_seed(self) -> Any:
        found = next((m for m in self.models.list() if m.note == "seed"), None)
        if found is None:  # hashed, so a rerun finds the same seed wherever its files are unpacked now
            files = file_hashes(self.seed_checkpoint) if Path(self.seed_checkpoint).is_dir() else {}
            return self.models.publish(self.seed_checkpoint, note="seed", files=files)
        same = relocated(found, self.seed_checkpoint)
        if same is None:
            raise ValueError(f"experiment {self.cfg.experiment!r} was started with seed {found.checkpoint}, not "
                             f"model.checkpoint={self.seed_checkpoint}: its stored samples belong to that seed; "
                             "use a new experiment name")
        return same

    def version_at(self, arm: str, iteration: int) -> Any:
        if iteration == 0:
            return self.seed_version()
        return next((m for m in self.models.list() if m.note == f"{arm} iteration {iteration}"), None)

    async def reload(self, version: Any) -> None:
        """The samplers on registry `version`: its weights from memory the first time, when a
        training of this run handed them back and sampler.weight_sync takes them; else its checkpoint."""
        if self.loaded != version.version:
            switch = await self.sampler.switch(version, self.weights.pop(version.version, None))
            log.info("%s", switch.line())
            self.switches.setdefault(version.version, switch)
            self.loaded = version.version

    # -- steps ------------------------------------------------------------------------------
    async def sample(self, arm: str, iteration: int, instructions: list[dict[str, str]]) -> dict[str, list[str]]:
        """K completions per instruction; stored per batch, only missing instructions are drawn."""
        c = self.cfg.sample
        done = self.state.get_rows(arm, f"it{iteration}", "samples")
        todo = [i for i in instructions if i["id"] not in done]
        params = SamplingParams(n=c.k, temperature=c.temperature, top_p=c.top_p, max_tokens=c.max_tokens,
                                seed=self.cfg.instruction_seed + iteration)
        bar = self.bar(len(instructions), f"[{arm} it{iteration}] sample", initial=len(instructions) - len(todo))
        for start in range(0, len(todo), c.batch_instructions):
            batch = todo[start:start + c.batch_instructions]
            rows = await self.sampler.generate([self.prompts[arm].build(i["instruction"]) for i in batch], params)
            new = {i["id"]: [x.text for x in row] for i, row in zip(batch, rows, strict=True)}
            self.state.put_rows(new, arm, f"it{iteration}", "samples")
            done |= new
            bar.update(len(batch))
        bar.close()
        return {i["id"]: done[i["id"]] for i in instructions}

    async def judge(self, arm: str, key: tuple[str, ...], instructions: list[dict[str, str]],
                    texts: dict[str, list[str]]) -> list[Group]:
        """Parse each completion and score its response alone; verdicts stored per batch of
        instructions (whole groups: a pairwise judge compares within one), failures kept as such."""
        done = self.state.get_rows(*key)
        todo = [i for i in instructions if i["id"] not in done]
        step = self.cfg.sample.batch_instructions
        if todo:
            with self.bar(len(instructions), f"[{arm}] judge {'/'.join(key[1:])}",
                          initial=len(instructions) - len(todo)) as bar:
                for start in range(0, len(todo), step):
                    done |= await self._judge_batch(arm, key, todo[start:start + step], texts)
                    bar.update(len(todo[start:start + step]))
        return [Group(i["id"], self.prompts[arm].build(i["instruction"]),
                      [Sample.from_dict(d) for d in done[i["id"]]]) for i in instructions]

    async def _judge_batch(self, arm: str, key: tuple[str, ...], todo: list[dict[str, str]],
                           texts: dict[str, list[str]]) -> dict[str, list[dict[str, Any]]]:
        parser = self.prompts[arm]
        groups = []
        for ins in todo:
            row = []
            for t in texts[ins["id"]]:
                p = parser.parse(t)
                row.append(Sample(completion=t, thought=p.thought, response=p.response, parsed=p.ok,
                                  judge_error="" if p.ok else f"unparsable: {p.error}"))
            groups.append(row)
        verdicts = await self.judge_fn(judge_items(todo, groups))
        flat = [s for row in groups for s in row]
        for s, v in zip(flat, verdicts, strict=True):
            if s.parsed:
                s.score = v.score
                s.judge_error = "" if v.ok else f"judge: {v.error}"
            else:  # unparsable: judged as an empty response, kept for measurement
                s.score = v.score if v.ok else None
        new = {ins["id"]: [s.to_dict() for s in row] for ins, row in zip(todo, groups, strict=True)}
        self.state.put_rows(new, *key)
        return new

    async def judge_fn(self, items: list[JudgeItem]):
        verdicts = await self.scorer.score(items)
        if len(verdicts) != len(items):
            raise RuntimeError(f"judge {self.scorer.name} returned {len(verdicts)} verdicts for {len(items)} items")
        return verdicts

    def make_pairs(self, arm: str, iteration: int, groups: list[Group]) -> tuple[list[dict], dict[str, Any]]:
        stored = self.state.get(arm, f"it{iteration}", "pairs")
        if stored is not None:
            return stored["pairs"], stored["counts"]
        for g in groups:  # unparsable outputs are pairs' rejected only, never scored candidates
            for s in g.samples:
                if not s.parsed:
                    s.score = None
        rho = choose_rho(groups, self.cfg.pairs)
        pairs, counts = build_pairs(groups, rho, self.cfg.pairs)
        self.state.put({"pairs": pairs, "counts": counts}, arm, f"it{iteration}", "pairs")
        return pairs, counts

    async def train_and_publish(self, arm: str, iteration: int, pairs: list[dict], start: Any,
                                counts: dict[str, Any]) -> Any:
        note = f"{arm} iteration {iteration + 1}"
        found = next((m for m in self.models.list() if m.note == note), None)
        if found is not None:  # trained before a restart
            return found
        rows = trl_rows(pairs, self.cfg.pairs.divergence_words)  # windows may drop pairs that do not differ
        if not rows:  # never publish the untouched start model under a trained version's name
            raise CannotContinue(no_rows_reason(counts, f"[{arm} it{iteration}]", windows_dropped=bool(pairs)))
        checkpoint, metrics, weights = await self.train_fn(rows, start, arm, iteration)
        new = self.models.publish(checkpoint, parent=start.version, metrics=metrics | counts, note=note)
        if weights is not None:
            self.weights[new.version] = weights
        return new

    async def measure(self, arm: str, version: Any, heldout: list[dict[str, str]]) -> dict[int, list[Sample]]:
        """One sample per held-out instruction per sampling seed, judged; stored by version and seed."""
        m, out = self.cfg.measure, {}
        bar = self.bar(len(m.seeds), f"[{arm}] measure {version.version}", unit="seed")
        for seed in m.seeds:
            key = ("measure", arm, version.version, f"seed{seed}")
            done = self.state.get_rows(*key)
            if len(done) < len(heldout):
                await self.reload(version)
                params = SamplingParams(n=1, temperature=m.temperature, top_p=m.top_p,
                                        max_tokens=self.cfg.sample.max_tokens, seed=seed)
                rows = await self.sampler.generate([self.prompts[arm].build(i["instruction"]) for i in heldout], params)
                texts = {i["id"]: [r[0].text] for i, r in zip(heldout, rows, strict=True)}
                await self.judge(arm, key, heldout, texts)
            groups = await self.judge(arm, key, heldout, {})
            out[seed] = [g.samples[0] for g in groups]
            bar.update(1)
        bar.close()
        return out

    async def head_to_head(self, key: tuple[str, ...], heldout: list[dict[str, str]], mine: list[Sample],
                           theirs: list[Sample]) -> float:
        """A comparative judge's win rate of `mine` over `theirs`, instruction by instruction: each
        pair is judged together (a tie counts half); stored under `key`, so a restart reuses it."""
        done = self.state.get_rows(*key)
        if len(done) < len(heldout):
            items = [JudgeItem(instruction=ins["instruction"], response=s.response, reference=ins.get("reference"),
                               group=ins["id"]) for ins, a, b in zip(heldout, mine, theirs, strict=True) for s in (a, b)]
            verdicts = await self.judge_fn(items)
            done = {}
            for k, ins in enumerate(heldout):
                a, b = verdicts[2 * k].score, verdicts[2 * k + 1].score
                a, b = (float("-inf") if x is None else x for x in (a, b))  # a failed verdict loses
                done[ins["id"]] = 1.0 if a > b else 0.5 if a == b else 0.0
            self.state.put_rows(done, *key)
        return sum(done[i["id"]] for i in heldout) / len(heldout)

    async def comparisons(self, arm: str, it: int, heldout: list[dict[str, str]],
                          measured: dict[tuple[str, int], dict[int, list[Sample]]],
                          reference: dict[int, list[Sample]]) -> dict[str, dict[int, float]] | None:
        """Win rates against the seed answering directly and against the direct arm, judged head to
        head (comparative judges only; absolute ones compare their stored scores in the report)."""
        if not self.comparative:
            return None
        version = self.version_at(arm, it).version
        wins: dict[str, dict[int, float]] = {"win_rate_vs_seed": {}}
        for seed, mine in measured[(arm, it)].items():
            wins["win_rate_vs_seed"][seed] = await self.head_to_head(
                ("compare", arm, version, "seed", f"seed{seed}"), heldout, mine, reference[seed])
            if arm == "thought" and ("direct", it) in measured:
                wins.setdefault("win_rate_vs_direct", {})[seed] = await self.head_to_head(
                    ("compare", arm, version, "direct", f"seed{seed}"), heldout, mine, measured[("direct", it)][seed])
        return wins

    # -- the loop ---------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        from thinking.report import iteration_entry

        cfg = self.cfg
        heldout = load_instructions(cfg.instructions, cfg.measure.heldout, cfg.heldout_seed)
        entries: dict[str, list[dict[str, Any]]] = {a: [] for a in self.arms}
        measured: dict[tuple[str, int], dict[int, list[Sample]]] = {}
        seed_v = self.seed_version()
        reference = await self.measure("direct", seed_v, heldout)  # the seed answering directly
        info: dict[tuple[str, int], dict[str, Any]] = {}
        for it in range(cfg.iterations + 1):
            for arm in self.arms:
                started = time.time()
                version = self.version_at(arm, it)
                measured[(arm, it)] = await self.measure(arm, version, heldout)
                info.setdefault((arm, it), {})["measure_s"] = round(time.time() - started, 2)
                info[(arm, it)]["model_version"] = version.version
                if it > 0 and version.version in self.switches:  # how the samplers took the trained version
                    info[(arm, it)] |= self.switches[version.version].summary()
            for arm in self.arms:
                wins = await self.comparisons(arm, it, heldout, measured, reference)
                entries[arm].append(iteration_entry(
                    it, info[(arm, it)], measured[(arm, it)], reference,
                    measured.get(("direct", it)) if arm == "thought" and cfg.baseline else None,
                    wins=wins, absolute=not self.comparative))
                e = entries[arm][-1]
                log.info("%s", step_line(arm, e, entries[arm][-2] if it else None))
                self.tracker.log({k: v for k, v in e.items() if k != "iteration"}, step=it, prefix=arm)
            if it == cfg.iterations:
                break
            train_ins = load_instructions(cfg.instructions, cfg.sample.instructions, cfg.instruction_seed + it)
            for arm in self.arms:
                started = time.time()
                start = self.version_at(arm, it)
                await self.reload(start)
                texts = await self.sample(arm, it, train_ins)
                groups = await self.judge(arm, (arm, f"it{it}", "judged"), train_ins, texts)
                pairs, counts = self.make_pairs(arm, it, groups)
                t_train = time.time()
                new = await self.train_and_publish(arm, it, pairs, start, counts)
                log.info("%s iteration %d: trained %s on %d pairs (rho %s, %d ties) in %s s", arm, it + 1,
                         new.version, counts["pairs"], fmt.num(counts["rho"]), counts["ties"],
                         fmt.num(time.time() - started))
                nxt = info.setdefault((arm, it + 1), {})
                nxt |= {"rho": counts["rho"], "pairs": counts["pairs"], "pair_counts": counts,
                        "train_s": round(time.time() - t_train, 2), "wall_s": round(time.time() - started, 2),
                        "trained_version": new.version}
        return {"iterations": entries["thought"], "baselines": {"direct": entries.get("direct", [])},
                "arms": list(self.arms)}
