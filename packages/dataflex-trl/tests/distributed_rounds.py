"""Two steps of ``filter`` and of ``pilot`` in real DataFlexGRPOTrainers under accelerate, run by
test_distributed_rounds.py (``torch.distributed.run --nproc_per_node 2 distributed_rounds.py OUT``).

Each process records, for every generation round or stage, what was generated (gathered: each row's prompt id,
completion tokens and rewards), the prompts each process asked for (its own draw), what its decision object
says on that process, and its own slice of the trained batch, and after the run its per-prompt ledger; the
main process saves every process's record to OUT, and the test rebuilds the expected batch and ledger from the
generated rows alone. ``filter`` keeps a ledger (``prompt_key``) and skips constant prompts in its refills; ``pilot`` draws its prompts through GRESO
(``pilot.draw``), whose history is the ledger.
"""

from __future__ import annotations

import os
import sys
import warnings
import zlib

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402

PROMPTS, GENERATIONS = 4, 4
SIGNAL = {"scorer": {"name": "group_reward_variance"},
          "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}}}  # fmt: skip
#: pilot.draw: GRESO's skip with a vanishing keep probability and no uniform floor in the sampler, so a prompt
#: whose rewards were all equal at a visit is not screened again (its probability 1e-9 of a fresh prompt's)
GRESO = {"mechanism": "curriculum", "prompt_key": "index",
         "scorer": {"name": "greso", "params": {"exploration": 1.0e-9, "min_keep": 1.0e-9}},
         "actuator": {"name": "temperature", "params": {"temperature": 1.0, "exploration": 0.0}}}  # fmt: skip
#: filter.draw: GRESO as published, its refill rounds sized from the last round's zero-variance share
SIZED = {"mechanism": "curriculum", "prompt_key": "index", "scorer": {"name": "greso_adaptive", "params": {"min_draw": 1}},
         "actuator": {"name": "temperature", "params": {"temperature": 1.0, "exploration": 0.0}}}  # fmt: skip
BLOCKS = {
    "filter": {"mechanism": "filter", **SIGNAL, "prompt_key": "index", "filter": {"max_rounds": 8, "skip_constant": 1}},
    "filter_sized": {"mechanism": "filter", **SIGNAL, "filter": {"max_rounds": 8, "draw": SIZED}},
    "pilot": {"mechanism": "pilot", **SIGNAL, "pilot": {"prompts": 2, "rollouts": 2, "max_stages": 6, "draw": GRESO}},
}
#: Pilot-Commit's preset at the paper's proportions (2 groups of 16 a step, pilots of 4) with its band admission,
#: ``max_off_steps`` 1 so that waiting in the buffer ends within the run, on 24 prompts so that passes come back,
#: with the per-prompt ledger.
PILOT_COMMIT = {
    "mechanism": "pilot", "prompt_key": "index", "scorer": {"name": "group_solve_rate"},
    "actuator": {"name": "threshold_band",
                 "params": {"low": 0.125, "high": 0.75, "low_inclusive": True, "high_inclusive": True}},
    "pilot": {"preset": "pilot-commit", "carry": {"max_off_steps": 1, "order": "std"}},
}  # fmt: skip
#: Per run: its block, prompts and generations a step, steps, reward and dataset size.
RUNS = {
    **{name: (block, PROMPTS, GENERATIONS, 2, "signal", 32) for name, block in BLOCKS.items()},
    "pilot_commit": (PILOT_COMMIT, 2, 16, 4, "leveled", 24),
}


def signal_reward(completions, index, **_):
    """Even prompt ids: 1 for every completion (no signal); odd: a value fixed by the completion's text."""
    return [1.0 if int(i) % 2 == 0 else (zlib.crc32(c.encode()) % 997) / 997 for c, i in zip(completions, index)]


def leveled_reward(completions, index, **_):
    """A prompt's completions succeed on ``index % 5`` quarters of them (0: never, 4: always), by a hash of each."""
    return [float(zlib.crc32(f"{i}:{c}".encode()) % 4 < int(i) % 5) for c, i in zip(completions, index)]


REWARDS = {"signal": signal_reward, "leveled": leveled_reward}


def rows_of(trainer, rows, output) -> list[tuple[int, tuple[int, ...]]]:
    """``(prompt id, completion tokens)`` of this process's ``rows`` and ``output``."""
    ids, mask = output["completion_ids"], output["completion_mask"].bool()
    return [(int(row["index"]), tuple(ids[i][mask[i]].tolist())) for i, row in enumerate(rows)]


def record(trainer, log: list) -> None:
    from accelerate.utils import gather_object

    generate, rounds, stages = trainer._dataflex_generate, trainer._dataflex_rounds, trainer._dataflex_stages
    rank = trainer.accelerator.process_index

    def generated(rows, group_size):
        local, output, rewards = generate(rows, group_size)
        made = gather_object(rows_of(trainer, local, output))
        asked = gather_object([[int(row["index"]) for row in rows]])  # what each process asked (its own draw)
        log[-1]["generated"].append(
            {"rows": made, "rewards": rewards.sum(1).cpu(), "group_size": group_size, "asked": asked}
        )
        return local, output, rewards

    def trained(inputs, output, decided):
        step = log[-1]
        step["trained"] = gather_object([rows_of(trainer, inputs, output)])
        step["num_items"] = gather_object([int(output["num_items_in_batch"])])
        step["rows_per_process"] = gather_object([len(output["advantages"])])
        if hasattr(decided, "chosen"):
            step["decided"] = gather_object([(rank, decided.rounds, [c.tolist() for c in decided.chosen()])])
        else:
            step["decided"] = gather_object(
                [(rank, decided.stages, decided.committed.tolist(), decided.admitted.tolist())]
            )

    def in_rounds(seam, inputs, output, step):
        log.append({"generated": [], "step": step})
        first = {"rows": gather_object(rows_of(trainer, inputs, output)),
                 "rewards": trainer._dataflex_rewards_per_func.sum(1).cpu(), "group_size": GENERATIONS}  # fmt: skip
        log[-1]["generated"].append(first)
        inputs, output, decided = rounds(seam, inputs, output, step)
        trained(inputs, output, decided)
        return inputs, output, decided

    def in_stages(seam, step):
        log.append({"generated": [], "step": step})
        inputs, output, decided = stages(seam, step)
        trained(inputs, output, decided)
        return inputs, output, decided

    trainer._dataflex_generate, trainer._dataflex_rounds, trainer._dataflex_stages = generated, in_rounds, in_stages


def main(out: str) -> None:
    from dataflex_trl import DataFlexGRPOTrainer
    from trl import GRPOConfig

    from dataflex_lab.trl.toy import char_tokenizer, tiny_model, toy_dataset

    world = int(os.environ.get("WORLD_SIZE", "1"))
    tokenizer = char_tokenizer()
    results = {"world": world}
    for name, (block, prompts, generations, steps, reward, size) in RUNS.items():
        args = GRPOConfig(
            output_dir=os.path.join(os.path.dirname(out), f"{name}{world}"),
            per_device_train_batch_size=prompts * generations // world,
            num_generations=generations,
            max_completion_length=6,
            max_steps=steps,
            learning_rate=1e-2,
            loss_type="dapo",
            logging_steps=1,
            report_to=[],
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
            seed=0,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = DataFlexGRPOTrainer(
                model=tiny_model(tokenizer, seed=0),
                reward_funcs=REWARDS[reward],
                args=args,
                train_dataset=toy_dataset(size, seed=0),
                processing_class=tokenizer,
                dataflex=block,
            )
        log: list = []
        record(trainer, log)
        trainer.train()
        from accelerate.utils import gather_object

        logged = [{k: v for k, v in e.items() if k.startswith(("dataflex/compute/", "dataflex/pilot/"))}
                  for e in trainer.state.log_history]  # fmt: skip
        ledger = trainer.dataflex.ledger  # every process's, after the run
        columns = ("rollouts", "rollouts_trained", "rollouts_filtered", "uniform_reward_streak", "times_sampled")
        state = {"ids": ledger.ids.values.tolist(), **{c: getattr(ledger, c).clone() for c in columns}}
        refill = getattr(trainer.dataflex.mechanism, "refill", None)  # the prompt ids the refills skip from now on
        state["skipped"] = [] if refill is None else [state["ids"][r] for r in refill.evicted.tolist()]
        results[name] = {"steps": log, "logged": gather_object([[e for e in logged if e]]),
                         "ledgers": gather_object([state])}  # fmt: skip
    if int(os.environ.get("RANK", "0")) == 0:
        torch.save(results, out)


if __name__ == "__main__":
    main(sys.argv[1])
