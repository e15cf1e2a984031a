"""The README's Python examples run as written, and its set-up commands are the ones CI runs."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "README has no python example"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


def test_readme_setup_is_two_commands_and_ci_runs_them():
    setup = README.split("## Set-up", 1)[1]
    block = re.search(r"```bash\n(.*?)```", setup, flags=re.S).group(1)
    commands = [ln for ln in block.strip().splitlines() if ln.strip()]
    assert len(commands) == 2
    assert "torch==2.13.0" in commands[0]
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci
