"""One DataFlex step of a real DataFlexGRPOTrainer under accelerate, run by test_distributed.py.

``python distributed_step.py OUT`` runs it in one process; under
``torch.distributed.run --nproc_per_node 2`` each process holds half of the
same generation batch (accelerate on the CPU, gloo). Completions come from a
``rollout_func`` that depends only on a row's place in the global batch, so
both runs see the same batch. The main process saves every row's weighted
advantages (gathered) and the step's metrics to OUT.
"""

from __future__ import annotations

import os
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402

PROMPTS, GENERATIONS = 4, 4
#: Group statistics (solve rate per prompt) and a softmax over the whole batch: both need every process's rows.
BLOCK = {
    "mechanism": "reweight",
    "scorer": {"name": "group_solve_rate", "params": {"success_threshold": 0.5}},
    "actuator": {"name": "softmax", "params": {"temperature": 0.5}},
}


def main(out: str) -> None:
    from accelerate.utils import gather, gather_object
    from dataflex_trl import DataFlexGRPOTrainer
    from trl import GRPOConfig

    from dataflex_lab.trl.toy import char_tokenizer, echo_reward, tiny_model, toy_dataset

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rows_per_process = PROMPTS * GENERATIONS // world
    tokenizer = char_tokenizer()

    def rollout(prompts, trainer):
        """Completions fixed by each row's global index: group g has g right answers of 4, lengths 1-3."""
        start = trainer.accelerator.process_index * len(prompts)
        prompt_ids, completion_ids = [], []
        for offset, prompt in enumerate(prompts):
            row = start + offset
            group, member = divmod(row, GENERATIONS)
            text = (prompt if member < group else ":") * (1 + member % 3)
            prompt_ids.append(tokenizer(prompt)["input_ids"])
            completion_ids.append(tokenizer(text)["input_ids"] + [tokenizer.eos_token_id])
        logprobs = [[0.0] * len(ids) for ids in completion_ids]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}

    args = GRPOConfig(
        output_dir=os.path.join(os.path.dirname(out), f"run{world}"),
        per_device_train_batch_size=rows_per_process,
        num_generations=GENERATIONS,
        max_completion_length=6,
        loss_type="bnpo",
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
            reward_funcs=echo_reward,
            args=args,
            train_dataset=toy_dataset(32, seed=0),
            processing_class=tokenizer,
            rollout_func=rollout,
            dataflex=BLOCK,
        )
    trainer.model.train()
    dataset = trainer.train_dataset
    everything = [dict(dataset[i]) for i in range(PROMPTS) for _ in range(GENERATIONS)]
    rank = trainer.accelerator.process_index
    output = trainer._generate_and_score_completions(
        everything[rank * rows_per_process : (rank + 1) * rows_per_process]
    )
    advantages = trainer.accelerator.pad_across_processes(output["advantages"], dim=1, pad_index=0)
    mask = trainer.accelerator.pad_across_processes(output["completion_mask"], dim=1, pad_index=0)
    advantages, mask = gather(advantages.contiguous()), gather(mask.contiguous())
    metrics = {k: v for k, v in trainer._metrics["train"].items() if k.startswith("dataflex/")}
    everyone = gather_object([(rank, metrics)])
    if trainer.accelerator.is_main_process:
        torch.save({"advantages": advantages.cpu(), "mask": mask.cpu(), "metrics": everyone, "world": world}, out)


if __name__ == "__main__":
    main(sys.argv[1])
