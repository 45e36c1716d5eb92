"""The command lines the codex, gemini and aider kinds build (no CLI is run here)."""

from __future__ import annotations

import pytest

from loopactors.workers._cli_adapter import CliCommand, CliRound, cli_adapter, parse_cli_options


def command(kind: str, spec: str = "", resume: str | None = None) -> CliCommand:
    adapter = cli_adapter(kind)
    assert adapter is not None
    options = parse_cli_options(adapter, spec)
    return adapter.command(CliRound("do it", options, resume, "/tmp/ws"))


def test_codex_runs_exec_json_with_the_prompt_on_stdin_and_resumes_by_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    fresh = command("codex", "model=gpt-5")
    assert fresh.argv[:3] == ("codex", "exec", "--json")
    assert fresh.argv[-1] == "-"
    assert fresh.stdin == b"do it"
    assert "resume" not in fresh.argv
    assert "--dangerously-bypass-approvals-and-sandbox" in fresh.argv
    assert fresh.argv[fresh.argv.index("--model") :][:2] == ("--model", "gpt-5")
    assert not any("model_provider" in a for a in fresh.argv)  # Codex's own configuration
    resumed = command("codex", resume="0199-abc")
    assert resumed.argv[:4] == ("codex", "exec", "resume", "0199-abc")


def test_codex_uses_openai_base_url_through_a_provider_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    argv = command("codex", "sandbox=workspace-write").argv
    assert 'model_provider="loopactors"' in argv
    assert 'model_providers.loopactors.base_url="http://127.0.0.1:9/v1"' in argv
    assert 'model_providers.loopactors.env_key="OPENAI_API_KEY"' in argv
    assert 'sandbox_mode="workspace-write"' in argv
    assert 'approval_policy="never"' in argv
    assert "--dangerously-bypass-approvals-and-sandbox" not in argv


def test_gemini_runs_headless_yolo_with_quiet_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_CLI_SYSTEM_DEFAULTS_PATH", raising=False)
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    fresh = command("gemini", "allowed_tools=read_file+write_file")
    assert fresh.argv[:3] == ("gemini", "--output-format", "stream-json")
    assert fresh.argv[-2:] == ("--prompt", "")
    assert fresh.argv[fresh.argv.index("--approval-mode") :][:2] == ("--approval-mode", "yolo")
    assert "read_file,write_file" in fresh.argv
    assert "--resume" not in fresh.argv
    assert fresh.env["GEMINI_CLI_SYSTEM_DEFAULTS_PATH"].endswith("quiet.json")
    assert fresh.env["GEMINI_TELEMETRY_ENABLED"] == "false"
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:9")
    resumed = command("gemini", "permission_mode=auto_edit", resume="uuid-1")
    assert resumed.argv[resumed.argv.index("--resume") :][:2] == ("--resume", "uuid-1")
    assert "auto_edit" in resumed.argv
    assert resumed.env["GEMINI_CLI_SYSTEM_DEFAULTS_PATH"].endswith("api-key.json")


def test_aider_runs_unattended_and_restores_its_chat_only_to_resume() -> None:
    fresh = command("aider", "model=openai/gpt-4o,args=--file a.py")
    for switch in ("--yes-always", "--no-pretty", "--no-stream", "--no-analytics"):
        assert switch in fresh.argv
    assert fresh.argv[-2:] == ("--message-file", "/dev/stdin")
    assert fresh.argv[fresh.argv.index("--file") :][:2] == ("--file", "a.py")
    assert "--restore-chat-history" not in fresh.argv
    assert fresh.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    resumed = command("aider", resume=".aider.chat.history.md")
    assert "--restore-chat-history" in resumed.argv


@pytest.mark.parametrize(
    ("kind", "spec", "message"),
    [
        ("codex", "max_turns=3", "codex worker option 'max_turns' is unknown; accepted:"),
        ("codex", "sandbox=open", "codex worker sandbox 'open' is unknown; accepted: bypass"),
        ("gemini", "permission_mode=ask", "gemini worker permission_mode 'ask' is unknown"),
        ("aider", "allowed_tools=a", "aider worker option 'allowed_tools' is unknown"),
        ("aider", "base_url=http://x", "aider worker option 'base_url' is unknown"),
    ],
)
def test_options_a_kind_cannot_use_are_refused(kind: str, spec: str, message: str) -> None:
    adapter = cli_adapter(kind)
    assert adapter is not None
    with pytest.raises(Exception, match=message):
        parse_cli_options(adapter, spec)
