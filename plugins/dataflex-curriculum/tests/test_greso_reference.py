"""``greso_adaptive`` against GRESO's reference code, step by step on one recorded stream of rewards.

The reference below is written from reading ``Infini-AI-Lab/GRESO`` at ``b277843`` (each part with its file and
lines: the docs' rollout-budget page, section GRESO), not from the component: a trace of ``(epoch, mean reward)`` per prompt appended after every generation round, the streaks
recounted from its tail (easy: mean >= 0.98; hard: the last and every trailing mean <= 0.11), the skip
``u < 1 - max(p ** count, 0.01)``, the controller on the step's shares of all-1 and all-0.1 groups (counted as
the reference's float32 metrics times the round's rows) against ``t / 3`` and ``2 t / 3`` from the second epoch,
and the next round's size ``max(min(int(remainder / (1 - ratio) / n * 1.25), default), floor)``.

The stream's rewards are on the reference's scale (1 correct, 0.1 wrong); the component sees them as DataFlex's
outcomes (successes out of rollouts). Both read the same uniforms, the run's keyed draws per ``(seed, step, row)``
(the reference's ``torch.rand``), and the same shuffled order of candidates per step, so each step's skipped
prompts, rounds and rewards agree as long as every decision does.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dataflex_curriculum import GresoAdaptive
from dataflex_curriculum.counter_beta import CounterStreams, stream_base
from dataflex_curriculum.greso_adaptive import SKIPPED_SCORE

from dataflex_core import Batch
from dataflex_core.state_fields import StateFieldError

PROMPTS, N, STEPS, STEPS_PER_EPOCH = 96, 8, 30, 4
TRAIN_GROUPS, DEFAULT_SIZE, MIN_DRAW, SEED = 16, 24, 6, 7
CORRECT, WRONG = 1.0, 0.1


def recorded_stream() -> np.ndarray:
    """``(steps, prompts, n)`` rewards (1 or 0.1): a third of the prompts mostly solved, a third mostly failed,
    a third in between, each drifting up as a policy would."""
    rng = np.random.default_rng(2506)
    base = np.concatenate([rng.uniform(0.85, 1.0, 32), rng.uniform(0.0, 0.1, 32), rng.uniform(0.2, 0.8, 32)])
    rate = np.clip(base[None, :] + 0.01 * np.arange(STEPS)[:, None], 0.0, 1.0)
    return np.where(rng.random((STEPS, PROMPTS, N)) < rate[:, :, None], CORRECT, WRONG)


class ReferenceGreso:
    """GRESO's ``all_probabilistic`` filtering, its p_easy / p_hard controller and its adaptive sampling size."""

    def __init__(self, *, p_easy=0.5, p_hard=0.5, target_zero_variance=0.25, min_p=0.05, max_p=0.95, floor=64):
        self.trace: dict[int, list[tuple[int, float]]] = {}
        self.p_easy, self.p_hard = p_easy, p_hard
        self.targeted_easy = target_zero_variance / 3
        self.targeted_hard = target_zero_variance * 2 / 3
        self.min_p, self.max_p, self.floor = min_p, max_p, floor
        self.easy_num = self.hard_num = self.total_num = 0.0

    def _tail(self, prompt: int, inside) -> int:
        count = 0
        for _, reward in reversed(self.trace.get(prompt, [])):
            if not inside(reward):
                break
            count += 1
        return count

    def skip(self, prompt: int, u: float) -> bool:
        trace = self.trace.get(prompt, [])
        if not trace:
            return False
        if u < 1 - max(self.p_easy ** self._tail(prompt, lambda r: r >= 0.98), 0.01):
            return True
        if trace[-1][1] > 0.11:
            return False
        return u < 1 - max(self.p_hard ** self._tail(prompt, lambda r: r <= 0.11), 0.01)

    def generated(self, epoch: int, prompts: list[int], rewards: np.ndarray) -> None:
        """One generation round: the trace, and the step's easy / hard counters as the reference's metrics."""
        for prompt, group in zip(prompts, rewards):
            self.trace.setdefault(prompt, []).append((epoch, float(group.mean())))
        scores = torch.tensor(rewards)
        groups, rows = len(prompts), rewards.size
        all_correct = torch.logical_and(scores.max(-1)[0] == 1, scores.min(-1)[0] == 1).sum() / groups
        all_wrong = torch.logical_and(scores.max(-1)[0] == 0.1, scores.min(-1)[0] == 0.1).sum() / groups
        self.easy_num += all_correct.item() * rows
        self.hard_num += all_wrong.item() * rows
        self.total_num += rows

    def sampling_size(self, remainder_rows: int, round_rewards: np.ndarray, default: int) -> tuple[int, bool]:
        scores = torch.tensor(round_rewards)
        ratio = ((scores.max(-1)[0] == scores.min(-1)[0]).sum() / len(round_rewards)).item()
        estimated = int(remainder_rows / (1 - ratio) / N * 1.25)
        return max(min(estimated, default), self.floor), estimated <= default

    def step_done(self, epoch: int) -> None:
        hard_ratio, easy_ratio = self.hard_num / self.total_num, self.easy_num / self.total_num
        if epoch > 0:
            if hard_ratio >= self.targeted_hard:
                self.p_hard = max(self.p_hard - 0.01, self.min_p)
            else:
                self.p_hard = min(self.p_hard + 0.01, self.max_p)
            if easy_ratio >= self.targeted_easy:
                self.p_easy = max(self.p_easy - 0.01, self.min_p)
            else:
                self.p_easy = min(self.p_easy + 0.01, self.max_p)
        self.easy_num = self.hard_num = self.total_num = 0.0


def component() -> GresoAdaptive:
    return GresoAdaptive(adapt_after_step=STEPS_PER_EPOCH, min_draw=MIN_DRAW, seed=SEED)


def run_stream(tmp_path, *, resume_at: int | None) -> list[dict]:
    """Both through the stream; per step what each decided (asserted equal as it goes)."""
    stream, reference, greso = recorded_stream(), ReferenceGreso(floor=MIN_DRAW), component()
    rows = torch.arange(PROMPTS)
    log = []
    for step in range(1, STEPS + 1):
        epoch = (step - 1) // STEPS_PER_EPOCH
        uniform = CounterStreams.of_rows(stream_base(SEED, step), rows.numpy()).uniform(0)
        skipped = greso.score(Batch({"prompt_index": rows}), step) == SKIPPED_SCORE
        expected = torch.tensor([reference.skip(p, float(uniform[p])) for p in range(PROMPTS)])
        assert torch.equal(skipped, expected), f"step {step}: skipped {skipped.nonzero()} vs {expected.nonzero()}"
        order = np.random.default_rng(step).permutation(PROMPTS)
        queue = [int(p) for p in order if not expected[p]]
        size, last, with_signal, visited, sizes = DEFAULT_SIZE, False, 0, [], []
        while queue:
            take, queue = queue[:size], queue[size:]
            rewards = stream[step - 1, take]
            reference.generated(epoch, take, rewards)
            visited += take
            zero_variance = rewards.max(-1) == rewards.min(-1)
            with_signal += int((~zero_variance).sum())
            if with_signal >= TRAIN_GROUPS or last:
                break
            size, last = reference.sampling_size((TRAIN_GROUPS - with_signal) * N, rewards, DEFAULT_SIZE)
            got = greso.next_draw_size(
                missing_groups=TRAIN_GROUPS - with_signal, zero_variance_groups=int(zero_variance.sum()),
                groups=len(take), rollout_n=N, default_size=DEFAULT_SIZE,
            )  # fmt: skip
            assert got == size, f"step {step}: next draw {got} vs the reference's {size}"
            sizes.append(size)
        reference.step_done(epoch)
        visited_rewards = stream[step - 1, visited]
        greso.observe(
            Batch(
                {
                    "prompt_index": torch.tensor(visited),
                    "rollouts": torch.full((len(visited),), N),
                    "successes": torch.tensor((visited_rewards == CORRECT).sum(-1), dtype=torch.float64),
                }
            ),
            step,
        )
        assert (greso.p_easy, greso.p_hard) == (reference.p_easy, reference.p_hard), f"step {step}"
        log.append({"skipped": int(expected.sum()), "sizes": sizes, "p": (greso.p_easy, greso.p_hard)})
        if step == resume_at:  # a checkpoint through the file a run writes, into a fresh component
            torch.save(greso.state_dict(), tmp_path / "greso.pt")
            greso = component()
            greso.load_state_dict(torch.load(tmp_path / "greso.pt", weights_only=True))
    return log


def test_greso_adaptive_decides_as_the_reference_at_every_step_through_a_resume(tmp_path):
    resumed = run_stream(tmp_path, resume_at=STEPS // 2)
    assert resumed == run_stream(tmp_path, resume_at=None)
    # the stream exercises every part: skips, sized rounds (down to the floor), both probabilities moving both ways
    assert sum(step["skipped"] for step in resumed) > 100
    sizes = [size for step in resumed for size in step["sizes"]]
    assert len(set(sizes)) > 1 and MIN_DRAW in sizes
    p_easy, p_hard = zip(*(step["p"] for step in resumed))
    assert p_easy[:STEPS_PER_EPOCH] == (0.5,) * STEPS_PER_EPOCH  # frozen through the first epoch
    assert min(p_easy) < 0.5 and min(p_hard) < 0.5
    assert any(b > a for a, b in zip(p_hard, p_hard[1:])) or any(b > a for a, b in zip(p_easy, p_easy[1:]))


def rounds_batch(rows: list[int], rewards: np.ndarray) -> Batch:
    """A round as a host hands it to the filter: ``N`` responses per prompt of ``rows`` (0/1 rewards), a group each."""
    per_row = np.repeat(np.asarray(rows), N)
    scores = torch.zeros(len(per_row), 2)
    scores[:, -1] = torch.tensor((rewards == CORRECT).reshape(-1), dtype=torch.float32)
    return Batch(
        {"response_mask": torch.ones(len(per_row), 2, dtype=torch.long), "rm_scores": scores},
        {"index": per_row.astype(object), "uid": np.repeat(np.arange(len(rows)), N).astype(object)},
    )


def test_a_filter_drawing_by_greso_adaptive_generates_refill_rounds_of_the_references_size_through_a_resume(
    tmp_path,
):
    """Through the session a host drives (``filter.draw`` by ``greso_adaptive``): after each short round the rows the
    seam hands the host for the next round (``refill_rows``) are as many as the reference's next sampling batch for
    that round's rewards; a run saved at step 6 and resumed from the files draws and sizes as the one that went on."""
    from dataflex_core.session import DataFlexSession
    from dataflex_core.step import FieldSupport, GenerationRounds, HostCapabilities, SeamSupport, TrainSampler
    from dataflex_lab.testing import PromptDataset

    stream, batch = recorded_stream(), 12
    host = HostCapabilities(
        name="simulated", seams={GenerationRounds: SeamSupport(True), TrainSampler: SeamSupport(True)},
        timings=("pre_rollout", "post_reward"),
        fields={name: FieldSupport(True) for name in ("response_mask", "rm_scores", "uid")},
    )  # fmt: skip
    block = {
        "mechanism": "filter", "scorer": {"name": "group_reward_variance"},
        "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}},
        "filter": {"max_rounds": 8, "on_short": "backfill", "draw": {
            "mechanism": "curriculum", "success_threshold": 1.0,
            "scorer": {"name": "greso_adaptive", "params": {"min_draw": 3, "seed": SEED}},
            "actuator": {"name": "temperature", "params": {"temperature": 1.0, "exploration": 0.0}},
        }},
    }  # fmt: skip

    def session(resume_from=None):
        flex = DataFlexSession(block)
        flex.mount(host, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
        sampler = flex.train_sampler(PromptDataset(list(range(PROMPTS))), batch_size=batch, seed=0)
        if resume_from is not None:  # the framework restores its dataloader's sampler, then DataFlex its state
            sampler.load_state_dict(torch.load(resume_from / "sampler.pt", weights_only=True))
            flex.restore(resume_from)
        return flex, sampler

    def steps(flex, sampler, first, last):
        seam, reference, sizes = flex.seam(GenerationRounds), ReferenceGreso(floor=3), []
        for step in range(first, last + 1):
            rounds, rows, drawn = seam.rounds(batch), sampler.next_block(), []
            while True:
                rewards = stream[step - 1, rows]
                drawn.append((rows, rewards))
                seam.admit(rounds, rounds_batch(rows, rewards), step)
                if not rounds.needs_refill:
                    break
                expected, _ = reference.sampling_size((batch - rounds.admitted_groups) * N, rewards, batch)
                rows = seam.refill_rows(rounds)
                assert len(rows) == expected, (
                    f"step {step}: a refill of {len(rows)} prompts, the reference's {expected}"
                )
                sizes.append(len(rows))
            chosen = rounds.chosen()
            kept = [
                (np.asarray(rows)[keep.numpy()], rewards[keep.numpy()]) for (rows, rewards), keep in zip(drawn, chosen)
            ]
            flex.run(rounds_batch(np.concatenate([r for r, _ in kept]).tolist(), np.concatenate([w for _, w in kept])),
                     step, generation=rounds)  # fmt: skip
        return sizes

    straight = steps(*session(), 1, 12)
    assert len(straight) > 6 and len(set(straight)) > 2 and 3 in straight  # sized rounds, down to the floor
    flex, sampler = session()
    first = steps(flex, sampler, 1, 6)
    flex.save(tmp_path / "global_step_6", 6)
    torch.save(sampler.state_dict(), tmp_path / "global_step_6" / "sampler.pt")
    assert first + steps(*session(resume_from=tmp_path / "global_step_6"), 7, 12) == straight


def test_the_zero_variance_share_moves_toward_its_target():
    """Skipping only easy prompts: once p_easy is adapted, the share of all-solved prompts among those rolled out
    falls toward the target (a third of 0.25), where fixed probabilities would leave it."""
    stream = recorded_stream()
    rows = torch.arange(PROMPTS)

    def easy_share(greso: GresoAdaptive) -> list[float]:
        shares = []
        for step in range(1, STEPS + 1):
            kept = rows[greso.score(Batch({"prompt_index": rows}), step) != SKIPPED_SCORE]
            solved = torch.tensor((stream[step - 1, kept.numpy()] == CORRECT).sum(-1), dtype=torch.float64)
            greso.observe(
                Batch({"prompt_index": kept, "rollouts": torch.full((len(kept),), N), "successes": solved}), step
            )
            shares.append(float((solved == N).to(torch.float64).mean()))
        return shares

    adapted = easy_share(GresoAdaptive(exploration_easy=0.95, seed=SEED))
    fixed = easy_share(GresoAdaptive(exploration_easy=0.95, target_zero_variance=None, seed=SEED))
    assert np.mean(adapted[-10:]) < np.mean(fixed[-10:]) - 0.05
    assert abs(np.mean(adapted[-10:]) - 0.25 / 3) < abs(np.mean(fixed[-10:]) - 0.25 / 3)


def test_the_next_draw_size_by_hand():
    greso = component()

    def size(missing, zero_variance, groups=12, default=DEFAULT_SIZE):
        return greso.next_draw_size(
            missing_groups=missing, zero_variance_groups=zero_variance, groups=groups, rollout_n=N,
            default_size=default,
        )  # fmt: skip

    assert size(30, 6) == DEFAULT_SIZE  # half without signal: int(30 x 8 / 0.5 / 8 x 1.25) = 75, over the cap
    assert size(4, 4) == 7  # a third: int(4 x 8 / (2/3) / 8 x 1.25) = 7
    assert size(1, 0) == MIN_DRAW  # int(1.25) = 1, floored
    assert size(1, 0, default=4) == 4  # the floor never exceeds the batch (the reference's 64 would)
    # a round without signal gives no estimate: the default size, where the reference divides by zero
    assert size(5, 12) == DEFAULT_SIZE


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"exploration_hard": 0.0}, r"exploration_hard must be a number in \(0, 1\]"),
        ({"target_zero_variance": 1.5}, r"target_zero_variance must be a number in \[0, 1\]"),
        ({"min_exploration": 0.5, "max_exploration": 0.4}, r"max_exploration must be a number in \[0.5, 1\]"),
        ({"draw_margin": 0.9}, r"draw_margin must be a number in \[1, inf\]"),
        ({"min_draw": 0}, r"min_draw must be an integer >= 1"),
        ({"adapt_after_step": 1.5}, r"adapt_after_step must be an integer >= 0"),
    ],
)
def test_greso_adaptive_params_are_checked(params, message):
    with pytest.raises(ValueError, match=message):
        GresoAdaptive(**params)


@pytest.mark.parametrize(
    ("edit", "field", "shown"),
    [
        (lambda s: s.update(p_easy=1.5), "p_easy", "1.5"),
        (lambda s: s.update(p_hard="0.5"), "p_hard", "'0.5'"),
        (lambda s: s.pop("visits"), "visits", "missing"),
        (lambda s: s["columns"].update(easy_streak=s["columns"]["easy_streak"] - 3), "columns.easy_streak", "-"),
        (lambda s: s["columns"]["hard_streak"].__setitem__(0, 0.5), "columns.hard_streak", "0.5"),
        (lambda s: s["columns"].pop("hard_streak"), "columns", "dict"),
        (lambda s: s["columns"]["easy_streak"].__setitem__(0, 1.0), "columns", "row 0"),
    ],
)
def test_a_resumed_state_is_checked_field_by_field(edit, field, shown):
    greso = component()
    greso.observe(
        Batch({"prompt_index": torch.tensor([0, 1]), "rollouts": torch.tensor([8, 8]),
               "successes": torch.tensor([0.0, 8.0], dtype=torch.float64)}),
        1,
    )  # fmt: skip
    state = greso.state_dict()
    state = {**state, "columns": {k: v.clone() for k, v in state["columns"].items()}}
    edit(state)
    with pytest.raises(StateFieldError) as caught:
        component().load_state_dict(state)
    assert caught.value.field == field and shown in str(caught.value)
