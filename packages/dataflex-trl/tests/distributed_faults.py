"""Two steps of ``mechanism: curriculum`` in a real DataFlexGRPOTrainer under accelerate, with one process at fault;
run by test_distributed_faults.py.

``python -m torch.distributed.run --nproc_per_node 2 distributed_faults.py OUT FAULT`` runs it; ``FAULT`` is
``raise`` (the scorer's ``observe``, a DataFlex call of the step that every process makes on its replica, raises
on process 1 only) or ``disagree`` (the scorer prefers another domain on process 1, so the replicas draw other
prompts), or, with ``mechanism: reweight`` (the step runs on the main process alone and its result is broadcast),
``main_raise`` (the main process's session raises, at the end of the step, an error that pickles but does not
unpickle: its ``__init__`` takes other arguments) or ``main_unpicklable`` (its shared state holds a lock, which does
not pickle). Each process writes ``OUT/rank<r>.json``: the error that stopped it (type and message, ``None`` if it
trained to the end) and the optimizer steps it took.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

PROMPTS, GENERATIONS = 4, 4
RANK = int(os.environ.get("RANK", "0"))
#: A mechanism that runs on the main process alone (its result broadcast to the others).
MAIN_ONLY = {
    "mechanism": "reweight",
    "scorer": {"name": "group_solve_rate", "params": {"success_threshold": 0.5}},
    "actuator": {"name": "softmax", "params": {"temperature": 0.5}},
}


class StoreError(Exception):
    """An error whose ``__init__`` takes other arguments than its message: it pickles, but does not unpickle."""

    def __init__(self, host: str, rank: int) -> None:
        super().__init__(f"the mechanism's store at {host} is unreachable from process {rank}")
        self.host, self.rank = host, rank


def fail_on_main(session, fault: str) -> None:
    """The main process's session fails where only the main process computes: its shared state."""
    import threading

    def shared_state():
        if fault == "main_raise":
            raise StoreError("db.internal", RANK)
        return {"lock": threading.Lock()}

    session.shared_state = shared_state


def main(out: str, fault: str) -> None:
    from dataflex_trl import DataFlexGRPOTrainer
    from trl import GRPOConfig

    from dataflex_core import register_scorer
    from dataflex_lab.testing.components import DomainPreferenceScorer, register_toy_components
    from dataflex_lab.trl.toy import char_tokenizer, echo_reward, tiny_model, toy_dataset

    names = register_toy_components("faults")

    @register_scorer("faults_domains")
    class Domains(DomainPreferenceScorer):
        """Vowel prompts only; under ``disagree`` process 1 prefers consonants; under ``raise`` its observe fails."""

        domain_scores = {"consonant" if fault == "disagree" and RANK == 1 else "vowel": 1.0}

        def observe(self, outcomes, step_id, **ctx):
            if fault == "raise" and RANK == 1:
                raise OSError(f"the scorer's store is unreachable from process {RANK}")
            super().observe(outcomes, step_id, **ctx)

    curriculum = {
        "mechanism": "curriculum",
        "prompt_key": "index",
        "scorer": {"name": "faults_domains"},
        "actuator": {"name": names["proportional"]},  # the sampler of that name: scored-0 prompts never drawn
    }
    block = MAIN_ONLY if fault.startswith("main_") else curriculum
    world = int(os.environ.get("WORLD_SIZE", "1"))
    tokenizer = char_tokenizer()
    args = GRPOConfig(
        output_dir=os.path.join(out, "run"),
        per_device_train_batch_size=PROMPTS * GENERATIONS // world,
        num_generations=GENERATIONS,
        max_completion_length=6,
        max_steps=2,
        learning_rate=1e-2,
        loss_type="dapo",
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        ddp_timeout=60,  # the old code left a process waiting on the one that failed: a minute, not half an hour
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = DataFlexGRPOTrainer(
            model=tiny_model(tokenizer, seed=0),
            reward_funcs=echo_reward,
            args=args,
            train_dataset=toy_dataset(32, seed=0),
            processing_class=tokenizer,
            dataflex=block,
        )
    if fault.startswith("main_") and RANK == 0:
        fail_on_main(trainer.dataflex, fault)
    error = None
    try:
        trainer.train()
    except Exception as exc:  # noqa: BLE001 - what stopped this process is the test's subject
        error = {"type": type(exc).__name__, "message": str(exc)}
    with open(os.path.join(out, f"rank{RANK}.json"), "w") as handle:
        json.dump({"error": error, "steps": trainer.state.global_step}, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
