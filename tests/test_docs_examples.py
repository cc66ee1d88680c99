"""The shell examples of README.md and docs/*.md are run and their output compared, so the docs cannot go stale.

The convention (docs/contributing.md, "Examples that are run"):

- An example whose output is shown is a ```` ```console ```` block. A line starting with ``$ `` is a
  command (continued on the next line while it ends with ``\\``); the lines up to the next ``$ `` line
  are its output: stdout and stderr together, as a terminal shows them.
- Each command runs with ``bash`` from the repository root, ``.venv/bin`` first on ``PATH``, no
  terminal on stdin, and no AWS credentials, AWS config or kubeconfig (so it can reach no account and
  no cluster). The commands of one block run in order, in the same folder: a mirror of the checkout
  (every entry linked) without its build outputs, so what they write (``cdk.out/``,
  ``k8s_manifests/dist/``, as ``make synth`` does) is the block's own and never touches the checkout's.
- Compared after one normalisation: trailing spaces and trailing blank lines are dropped. A line that
  is exactly ``...`` matches any number of lines, none included. The exit status is not compared.
- ``<!-- requires: WHAT -->`` on the line before a block skips it, with WHAT's reason (``REQUIREMENTS``
  below; free text after a colon adds detail), unless this machine has it (``k8s-binaries``: the
  control plane ``make k8s`` builds; then the block runs). A block whose program is not installed
  (``jq``) is skipped too, naming it.
- Everywhere else (```` ```bash ```` blocks), commands are shown without output and without ``$``; a
  ``$ `` line outside a console block is an error, so an output cannot hide from the runner.
- Every ``llm-infra`` command line of any block, run or not, is parsed by the command's own parser:
  a renamed or removed flag fails here even in an example that needs AWS.

``LLM_INFRA_UPDATE_DOCS=1`` writes what each command prints now over every differing output without a
``...`` line, as ``--snapshot-update`` does for snapshots: review the diff.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
COMMAND_TIMEOUT_S = 180

# What a marked example needs, and the reason it is skipped where that is missing.
REQUIREMENTS = {
    "aws": "needs AWS credentials and an account",
    "cluster": "needs a deployed cluster (kubeconfig, or HyperPod through the AWS API)",
    "gpu": "needs NVIDIA GPUs",
    "k8s-binaries": "needs the control plane built by `make k8s` (or $LLM_INFRA_K8S_BIN_DIR)",
    "manual": "needs a step by hand while it runs",
}


def available(what: str) -> bool:
    """Whether this machine has what a marked example needs: only the control plane can be here."""
    if what == "k8s-binaries":
        from llm_infra.rehearsal import control_plane

        names = (*control_plane.REQUIRED, *control_plane.OPTIONAL)
        return not control_plane.missing_binaries(control_plane.default_bin_dir(), names)
    return False


FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<info>[^`\s]*)")
REQUIRES = re.compile(r"^\s*<!--\s*requires:\s*(?P<what>[a-z0-9-]+)\s*(?::\s*(?P<detail>.*?))?\s*-->\s*$")
SHELL_BUILTINS = {"cd", "export", "cat", "echo", "test", "true", "false", "set", "read", "for", "if", "source"}


@dataclass
class Command:
    line: int  # 1-based line of the `$ ` in the file
    text: str  # the command as bash runs it (continuation lines joined by newlines)
    expected: list[str] = field(default_factory=list)
    output_line: int = 0  # 1-based line where its output starts (or would start)


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    info: str
    lines: list[str]  # the block's content, indentation removed
    requires: tuple[str, str] | None = None  # (what, detail)
    indent: int = 0  # of the fence (a block inside a list item)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"

    def commands(self) -> list[Command]:
        """A console block's commands, each with the output shown after it."""
        commands: list[Command] = []
        continuing = False
        for number, text in enumerate(self.lines, start=self.line + 1):
            if continuing:
                commands[-1].text += "\n" + text
                commands[-1].output_line = number + 1
                continuing = text.rstrip().endswith("\\")
            elif text.startswith("$ ") or text == "$":
                commands.append(Command(number, text[2:], output_line=number + 1))
                continuing = text.rstrip().endswith("\\")
            elif commands:
                commands[-1].expected.append(text)
        return commands


def read_blocks(path: Path) -> list[Block]:
    """Every fenced code block of a Markdown file, with the `requires` marker on the line before it."""
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        requires = None
        before = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        if marker := REQUIRES.match(before):
            requires = (marker["what"], marker["detail"] or "")
        content: list[str] = []
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence[0] * len(fence)):
            raw = lines[end]
            content.append(raw[indent:] if raw[:indent].strip() == "" else raw.lstrip())
            end += 1
        blocks.append(Block(path, index + 1, opening["info"], content, requires, indent))
        index = end + 1
    return blocks


@cache
def all_blocks() -> list[Block]:
    return [block for path in DOC_FILES for block in read_blocks(path)]


def console_blocks() -> list[Block]:
    return [block for block in all_blocks() if block.info == "console"]


# ---- comparing ---------------------------------------------------------------------------------------


def normalise(lines: list[str]) -> list[str]:
    """Trailing spaces and trailing blank lines dropped: the only differences the comparison ignores."""
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def matches(expected: list[str], actual: list[str]) -> bool:
    """``expected`` equals ``actual``, where a line ``...`` in ``expected`` stands for any number of lines."""

    @cache
    def match(i: int, j: int) -> bool:
        if i == len(expected):
            return j == len(actual)
        if expected[i] == "...":
            return match(i + 1, j) or (j < len(actual) and match(i, j + 1))
        return j < len(actual) and expected[i] == actual[j] and match(i + 1, j + 1)

    return match(0, 0)


def environment(scratch: Path) -> dict[str, str]:
    """The repository's tools first, no AWS identity and no cluster: what an example may rely on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KUBECONFIG", "PYTEST_"))}
    env.update(
        PATH=f"{REPO_ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        AWS_CONFIG_FILE=str(scratch / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(scratch / "no-aws-credentials"),
        AWS_EC2_METADATA_DISABLED="true",  # no instance role either, and no 1 s wait for one
        KUBECONFIG=str(scratch / "no-kubeconfig"),
        COLUMNS="120",
        TERM="dumb",
        NO_COLOR="1",
        CDK_DISABLE_CLI_TELEMETRY="true",
        JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION="1",
    )
    return env


def missing_program(block: Block, env: dict[str, str]) -> str | None:
    for command in block.commands():
        words = command.text.split()
        program = words[0] if words else ""
        installed = shutil.which(program, path=env["PATH"]) if program else ""
        if installed is None and "/" not in program and "=" not in program and program not in SHELL_BUILTINS:
            return program
    return None


def run_block(block: Block, scratch: Path) -> list[str]:
    """Run the block's commands in order; one message per command whose output differs."""
    env = environment(scratch)
    if program := missing_program(block, env):
        pytest.skip(f"needs `{program}`, which is not installed")
    checkout = mirror_of_the_checkout(scratch)
    problems = []
    for command in block.commands():
        try:
            result = subprocess.run(
                ["bash", "-o", "pipefail", "-c", command.text],
                cwd=checkout,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
            )
            actual, status = result.stdout.splitlines(), f"exit {result.returncode}"
        except subprocess.TimeoutExpired as timeout:
            output = timeout.stdout.decode() if isinstance(timeout.stdout, bytes) else timeout.stdout or ""
            actual, status = output.splitlines(), f"timed out after {COMMAND_TIMEOUT_S} s"
        expected, actual = normalise(command.expected), normalise(actual)
        if not matches(expected, actual) and UPDATE and "..." not in expected:
            shown = [" " * block.indent + line if line else "" for line in actual]
            UPDATES.setdefault(block.path, []).append((command.output_line, len(command.expected), shown))
        elif not matches(expected, actual):
            diff = "\n".join(difflib.unified_diff(expected, actual, "shown in the docs", "printed now", lineterm=""))
            problems.append(
                f"{block.path.relative_to(REPO_ROOT)}:{command.line}: the output differs ({status})\n"
                f"command: {command.text}\n{diff}"
            )
    return problems


# `LLM_INFRA_UPDATE_DOCS=1`: write what each command prints now over a differing output that has no `...`
# line (review the diff, as with snapshots); the files are rewritten once every example has run.
UPDATE = os.environ.get("LLM_INFRA_UPDATE_DOCS") == "1"
UPDATES: dict[Path, list[tuple[int, int, list[str]]]] = {}


@pytest.fixture(scope="module", autouse=True)
def _write_updated_outputs() -> Iterator[None]:
    yield
    for path, updates in UPDATES.items():
        lines = path.read_text().split("\n")
        for start, count, shown in sorted(updates, reverse=True):  # from the bottom: line numbers hold
            lines[start - 1 : start - 1 + count] = shown
        path.write_text("\n".join(lines))
    UPDATES.clear()


# What the examples may write, as `make synth` does: each block gets its own, never the checkout's.
BUILD_OUTPUTS = ("cdk.out", "k8s_manifests/dist", "site")


def mirror_of_the_checkout(scratch: Path) -> Path:
    """A folder that looks like the repository root (every entry a link into the checkout) but has
    no build outputs of its own: the block's commands write theirs there, next to nobody else's."""
    view = scratch / "checkout"
    linked = {REPO_ROOT}
    for output in BUILD_OUTPUTS:
        parts = Path(output).parts
        linked.update(REPO_ROOT.joinpath(*parts[:i]) for i in range(1, len(parts)))
    skipped = {REPO_ROOT / output for output in BUILD_OUTPUTS}
    for folder in sorted(linked):
        target = view / folder.relative_to(REPO_ROOT)
        target.mkdir(parents=True, exist_ok=True)
        for entry in folder.iterdir():
            if entry not in linked and entry not in skipped:
                (target / entry.name).symlink_to(entry)
    return view


def synthesizes(block: Block) -> bool:
    """Whether the block synthesizes the app (``cdk synth`` in a process of its own: the extra_synth tier)."""
    return any(re.search(r"\bcdk synth\b|\bmake (synth|rehearse)\b", c.text) for c in block.commands())


def console_params(synthesizing: bool) -> list:
    """One test per console block that synthesizes the app (``synthesizing``), or that does not."""
    return [pytest.param(block, id=block.where) for block in console_blocks() if synthesizes(block) is synthesizing]


def check_example(block: Block, tmp_path: Path) -> None:
    if block.requires and not available(block.requires[0]):
        what, detail = block.requires
        pytest.skip(REQUIREMENTS.get(what, what) + (f": {detail}" if detail else ""))
    problems = run_block(block, tmp_path)
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize("block", console_params(synthesizing=False))
def test_console_example(block: Block, tmp_path: Path) -> None:
    check_example(block, tmp_path)


@pytest.mark.parametrize("block", console_params(synthesizing=True))
def test_console_example_that_synthesizes(block: Block, extra_synth: None, tmp_path: Path) -> None:
    """A block that runs ``cdk synth`` (tens of seconds each): the extra_synth tier."""
    check_example(block, tmp_path)


# ---- the convention itself ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_output_is_shown_only_in_console_blocks(path: Path) -> None:
    """A ``$ `` prompt anywhere but in a console block would be an output the runner never sees."""
    problems = []
    for block in read_blocks(path):
        if block.info == "console":
            if not block.commands():
                problems.append(f"{block.where}: a console block without a `$ ` command")
            if block.requires and block.requires[0] not in REQUIREMENTS:
                known = ", ".join(REQUIREMENTS)
                problems.append(f"{block.where}: unknown `requires: {block.requires[0]}`; known: {known}")
            continue
        if block.info in ("markdown", "md"):  # Markdown source shown as such (docs/contributing.md)
            continue
        for number, text in enumerate(block.lines, start=block.line + 1):
            if text.startswith("$ "):
                kind = f"```{block.info}" if block.info else "``` (no language)"
                problems.append(
                    f"{block.path.relative_to(REPO_ROOT)}:{number}: a `$ ` command in a {kind} block. With its"
                    " output shown it must be a ```console block, run by this test or marked on the line before"
                    f" with `<!-- requires: WHAT -->` (WHAT: {', '.join(REQUIREMENTS)}); without output, drop the `$ `"
                )
    assert not problems, "\n".join(problems)


def test_matching_rules() -> None:
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "b"], ["a", "b"])
    assert matches(["..."], [])
    assert not matches(["a", "...", "d"], ["a", "b", "c"])
    assert not matches(["a"], ["a", "b"])
    assert normalise(["x  ", "", " "]) == ["x"]
    block = Block(REPO_ROOT / "README.md", 1, "console", ["$ a \\", "  --b", "out", "$ c", "more"])
    assert [(c.text, c.expected) for c in block.commands()] == [("a \\\n  --b", ["out"]), ("c", ["more"])]


# ---- every llm-infra command line parses ---------------------------------------------------------------

SHELL_OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1", "2>/dev/null"}


def llm_infra_lines() -> list[tuple[str, list[str]]]:
    """(file:line, argv) of every ``llm-infra ...`` command in any block: run, skipped or shown as bash."""
    found = []
    for block in all_blocks():
        if block.info not in ("console", "bash", "sh", "shell"):
            continue
        if block.info == "console":
            texts = [(c.line, c.text) for c in block.commands()]
        else:
            texts, pending = [], ""
            for number, text in enumerate(block.lines, start=block.line + 1):
                pending = f"{pending}\n{text}" if pending else text
                if not text.rstrip().endswith("\\"):
                    texts.append((number, pending))
                    pending = ""
        for number, text in texts:
            try:
                words = shlex.split(text.replace("\\\n", " "), comments=True)
            except ValueError:
                continue
            if not words or words[0] != "llm-infra":
                continue
            argv = []
            for word in words[1:]:
                if word in SHELL_OPERATORS or word.startswith((">", "2>")):
                    break
                argv.append(word)
            found.append((f"{block.path.relative_to(REPO_ROOT)}:{number}", argv))
    return found


@pytest.mark.parametrize(("where", "argv"), llm_infra_lines(), ids=[where for where, _ in llm_infra_lines()])
def test_llm_infra_command_lines_parse(where: str, argv: list[str]) -> None:
    """The flags the docs show exist: each command line goes through the command's own parser (nothing runs)."""
    from llm_infra.cli import build_parser

    errors = io.StringIO()
    with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exit_:
            assert exit_.code in (0, None), f"{where}: `llm-infra {shlex.join(argv)}` is refused:\n{errors.getvalue()}"


# ---- what else the docs must keep up with --------------------------------------------------------------


def test_every_config_key_is_in_the_configuration_table() -> None:
    from dataclasses import fields

    from llm_infra.config import TrainingConfig

    page = (REPO_ROOT / "docs" / "configuration.md").read_text()
    rows = {key for line in page.splitlines() if line.startswith("| `") for key in re.findall(r"`(\w+)`", line[:80])}
    missing = [f.name for f in fields(TrainingConfig) if f.name not in rows]
    assert not missing, f"docs/configuration.md's key table lacks {missing}"


def test_the_repository_map_names_every_module() -> None:
    """Each module of ``llm_infra/`` appears in docs/repository.md by its file name or by its folder."""
    page = (REPO_ROOT / "docs" / "repository.md").read_text()
    package = REPO_ROOT / "llm_infra"
    missing = []
    for module in sorted(package.rglob("*.py")):
        relative = module.relative_to(package)
        if module.name == "__init__.py" and relative.parent == Path("."):
            continue
        folder = f"`{relative.parts[0]}/`" if len(relative.parts) > 1 else None
        if f"`{module.name}`" not in page and f"`{relative}`" not in page and (folder is None or folder not in page):
            missing.append(str(relative))
    assert not missing, f"docs/repository.md does not name llm_infra/ {missing}"


def test_the_site_builds_strict(tmp_path: Path) -> None:
    """`make docs`: every page in the nav, every link and anchor resolves (mkdocs --strict)."""
    mkdocs = REPO_ROOT / ".venv" / "bin" / "mkdocs"
    if not mkdocs.exists():
        pytest.skip("mkdocs is not installed (the dev extra)")
    result = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO_ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
