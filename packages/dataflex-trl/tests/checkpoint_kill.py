"""A TRL run killed (SIGKILL) between transformers' checkpoint save and DataFlex's files; run by test_hostile.py.

``python checkpoint_kill.py TMP`` trains ``BLOCK`` of test_hostile.py with ``save_steps=1, save_total_limit=1``
into ``TMP/out`` (trl_testkit's ``grpo_config``) and kills itself once transformers has written ``checkpoint-2``,
before DataFlex writes its files there: what a kill inside the save leaves on disk, nothing run after it.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from trl_testkit import grpo_config  # noqa: E402  (registers the test components, as the tests' conftest does)

BLOCK = {"scorer": {"name": "hostkit_counter"}, "actuator": {"name": "trltest_proportional"}}


def main(tmp: str) -> None:
    from dataflex_trl import DataFlexGRPOTrainer

    from dataflex_core.session import DataFlexSession
    from dataflex_lab.trl.toy import char_tokenizer, echo_reward, tiny_model, toy_dataset

    write = DataFlexSession.write_state

    def killed_at_the_second_save(self, folder, state):
        if os.path.basename(folder) == "checkpoint-2":
            os.kill(os.getpid(), signal.SIGKILL)
        return write(self, folder, state)

    DataFlexSession.write_state = killed_at_the_second_save
    tokenizer = char_tokenizer()
    args = grpo_config(Path(tmp), "dapo", max_steps=3, save_strategy="steps", save_steps=1, save_total_limit=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = DataFlexGRPOTrainer(
            model=tiny_model(tokenizer, seed=0),
            reward_funcs=echo_reward,
            args=args,
            train_dataset=toy_dataset(64, seed=0),
            processing_class=tokenizer,
            dataflex=BLOCK,
        )
    trainer.train()


if __name__ == "__main__":
    main(sys.argv[1])
