"""The coding-agent CLI kinds' pure rules: what counts as a completion claim
(docs/agent-clis.md, Completion) and what a round cost."""

from __future__ import annotations

import pytest

from loopactors.workers._cli_worker import cost_of_round, promise_claimed, promise_instruction

TAG = "<promise>DONE</promise>"


@pytest.mark.parametrize(
    "reply",
    [
        TAG,
        f"All tests pass.\n{TAG}",
        f"All tests pass.\n\n   {TAG}  \n\n",
        f"Fixed it.\r\n{TAG}\r\n",
        f"```\ncode\n```\n{TAG}",  # a closed block before the tag is no matter
    ],
)
def test_a_tag_alone_on_the_last_non_empty_line_is_a_claim(reply: str) -> None:
    assert promise_claimed(reply, "DONE")


@pytest.mark.parametrize(
    "reply",
    [
        # the false positive: the tag mentioned in a sentence
        f"I will end with `{TAG}` only once the tests pass. Two still fail: not done yet.",
        f"I will end with {TAG} only once the tests pass ... not done yet",
        f"All done. {TAG}",  # in a sentence, even at its end
        f'The loop ends when I write "{TAG}".\nNot yet.',
        f'"{TAG}"',  # quoted
        f"`{TAG}`",  # in backticks
        f"> {TAG}",  # a quoted line
        f"The instruction says:\n```\n{TAG}\n```",  # in a code block
        f"Example:\n```text\n{TAG}",  # in a code block left open
        f"~~~\n{TAG}",
        f"{TAG}\nbut the build still fails",  # not the last line
        "<promise>DONE</promise><promise>DONE</promise>",
        "<promise>done</promise>",  # another word
        "<promise>DONE</promise>.",
        "",
        "\n\n",
    ],
)
def test_a_mention_of_the_tag_is_no_claim(reply: str) -> None:
    assert not promise_claimed(reply, "DONE")


def test_the_word_is_the_loops_own() -> None:
    assert promise_claimed("ok\n<promise>SHIPPED</promise>", "SHIPPED")
    assert not promise_claimed("ok\n<promise>DONE</promise>", "SHIPPED")


def test_the_instruction_asks_for_the_tag_alone_on_the_last_line() -> None:
    text = promise_instruction("tests pass", "DONE")
    assert "line that holds only <promise>DONE</promise>" in text
    assert "Objective of this loop: tests pass" in text


def test_a_rounds_cost_is_the_sessions_new_total_less_its_earlier_one() -> None:
    assert cost_of_round(0.0048, 0.0032) == pytest.approx(0.0016)
    assert cost_of_round(0.0016, None) == 0.0016  # a new session: all of it
    assert cost_of_round(0.0016, 0.0032) == 0.0016  # the CLI counted afresh: never negative
    assert cost_of_round(0.0032, 0.0032) == 0.0
