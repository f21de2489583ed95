"""From a crontab file: the lines that run ``manage.py <command>`` become schedules of the
built-in command task.

A line is five time fields (or a macro: ``@hourly``, ``@daily``, ``@midnight``, ``@weekly``,
``@monthly``, ``@yearly``, ``@annually``, followed by spaces or tabs) and a shell command.
The command is read with shell quoting; the part that runs ``manage.py`` (or
``django-admin``) gives the management command and its arguments. A system crontab's user
column (``/etc/crontab``, ``/etc/cron.d``) is recognised and dropped. ``CRON_TZ=`` and
``TZ=`` lines set the zone of the lines after them.

A schedule runs one management command, without a shell. Two shapes of the shell around
that one command have a meaning a schedule keeps, and are read strictly (``Shape``): a
``cd DIR &&`` before it (the command runs in the process that runs the task, in its
project, whatever the directory), and its output sent to a file or away at its end
(``> FILE``, ``>> FILE`` or ``> /dev/null``, then maybe ``2>&1``; or ``2>&1`` alone): the
run's record keeps the end of the output when the command's entry in
``SCHEDULINATOR["COMMANDS"]`` sets ``keep_output``, else it goes nowhere. The report says,
per line, what changes (``changes``). Any other line whose meaning needs the shell is left
out, its reason naming each token that does: an operator (``;``, ``&&``,
``||``, ``|``, ``&``, a subshell's parentheses), a redirection (``> file``, ``>> file``,
``2>&1``, ``< file``), a command substitution (``$(...)``, backticks), a variable
(``$HOME``), a pattern the shell expands (``*.json``, ``~``), a variable set for the command
(``NAME=value python manage.py ...``); and cron's own ``%`` (what follows goes to the
command's input). So is a line that runs ``manage.py`` through another program than Python
(``timeout 60``, ``flock -n lock``, ``nice``, ``python -W error``): the schedule would run
the command without what that program adds. Quoted, the shell's characters are plain text
and the line is imported. shlex finds the tokens (quotes kept, so a quoted ``;`` is not an
operator); nothing here parses the shell's grammar. Everything else that cannot be imported
is reported too: a line that runs no ``manage.py``, ``@reboot``, a command outside
``SCHEDULINATOR["COMMANDS"]`` (the command task's allowlist), a line that cannot be parsed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from django_schedulinator.conf import app_settings
from django_schedulinator.importers import Found
from django_schedulinator.management.task import NAME as COMMAND_TASK
from django_schedulinator.management.task import refusal

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
ENVIRONMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
# What a shell operator (a token of shlex's punctuation characters) does to the line.
OPERATORS = {
    ";": "runs another command after this one",
    "&&": "runs another command if this one succeeds",
    "||": "runs another command if this one fails",
    "|": "a pipe to another command",
    "&": "runs it in the background",
}
PUNCTUATION = "();<>|&"
VARIABLE = re.compile(r"\$(\{[^}]*\}?|[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
CRON_PERCENT = re.compile(r"(?<!\\)%")  # cron turns it into a newline; \% is a plain %
DJANGO_ENTRY_POINTS = ("manage.py", "django-admin", "django-admin.py")
# The only program a line may run manage.py with: Python itself, with no options.
PYTHON = re.compile(r"^python[0-9.]*$")


def from_file(text: str, path: str, timezone: str) -> Iterator[Found]:
    """The ``manage.py`` lines of a crontab (``timezone``: the zone of its times, until a
    ``CRON_TZ=`` or ``TZ=`` line says another)."""
    names: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        source = f"{PurePath(path).name}:{number}"
        variable = ENVIRONMENT.match(stripped)  # NAME=value (a schedule starts otherwise)
        if variable:
            name, value = variable.groups()
            if name in ("CRON_TZ", "TZ"):
                timezone = value.strip().strip("'\"")
            continue
        try:
            cron, command, args, shape = _parse(stripped)
        except ValueError as exc:
            yield Found(source, None, str(exc))
            continue
        problem = refusal(command, args)
        if problem:
            yield Found(source, None, problem)
            continue
        base = "crontab: manage.py " + shlex.join([command, *args])
        base = base[:190]
        names[base] = names.get(base, 0) + 1
        name = base if names[base] == 1 else f"{base} ({names[base]})"
        fields = _fields(name, cron, command, args, timezone)
        yield Found(source, fields, changes=shape.changes(command))


@dataclass(frozen=True)
class Shape:
    """What the shell does around a line's one command that a schedule keeps the meaning of:
    ``cd DIR &&`` before it, its output sent to a file or away after it."""

    directory: str | None = None  # cd DIR (as written, quotes kept)
    output: str | None = None  # > FILE or >> FILE (unquoted); "/dev/null": discarded
    errors_too: bool = False  # 2>&1: its errors go where its output goes

    def changes(self, command: str) -> tuple[str, ...]:
        """What the schedule does otherwise than the line, for the import's report."""
        found = []
        if self.directory is not None:
            where = shlex.split(self.directory)[0]
            found.append(
                f"cd {self.directory} is dropped: the command runs in the process that runs "
                f"the task (its project, settings and working directory), not in {where}"
            )
        entry = f"SCHEDULINATOR['COMMANDS'][{command!r}]"
        if self.output is None:  # cron mails what a command prints (MAILTO)
            before = "its output and errors went to cron's mail"
        elif self.output == "/dev/null":
            before = (
                "its output and errors were discarded"
                if self.errors_too
                else "its output was discarded and its errors went to cron's mail"
            )
        elif self.errors_too:
            before = f"its output and errors went to {self.output}"
        else:
            before = f"its output went to {self.output} and its errors to cron's mail"
        if app_settings.COMMANDS[command].keep_output:
            after = f"the run's record keeps the end of both ({entry} sets keep_output)"
        else:
            after = (
                "they go nowhere: the run records only the exit status "
                f"({entry} does not set keep_output)"
            )
        found.append(f"{before}; now {after}")
        return tuple(found)


def _fields(name: str, cron: str, command: str, args: list[str], timezone: str) -> dict[str, Any]:
    return {
        "name": name,
        "task": COMMAND_TASK,
        "args": [command, *args],
        "kind": "cron",
        "cron": cron,
        "timezone": timezone,
    }


def _parse(line: str) -> tuple[str, str, list[str], Shape]:
    """The cron expression, the management command and its arguments of a line, and the
    shell around the command that the schedule keeps the meaning of."""
    if line.startswith("@"):
        macro, *command = line.split(None, 1)  # a space or a tab after it
        if macro == "@reboot":
            raise ValueError("@reboot runs at boot, not on a schedule")
        if macro not in MACROS:
            raise ValueError(f"unknown macro {macro!r}")
        cron, rest = MACROS[macro], "".join(command)
    else:
        fields = line.split(None, 5)
        if len(fields) < 6:
            raise ValueError("not five time fields and a command")
        cron, rest = " ".join(fields[:5]), fields[5]
    line_command = rest
    rest, shape = _kept_shape(rest)
    try:
        words = shlex.split(rest, comments=True)
    except ValueError as exc:
        raise ValueError(f"the command cannot be read: {exc}") from None
    if words and not _is_path_or_program(words[0]) and len(words) > 1:
        words = words[1:]  # a system crontab's user column
    for i, word in enumerate(words):
        if PurePath(word).name in DJANGO_ENTRY_POINTS and i + 1 < len(words):
            features = _shell_features(rest)
            if features:
                # Refused: named as the whole line's shell, the shapes kept included.
                whole = _shell_features(line_command)
                features = whole + [f for f in features if f not in whole]
                raise ValueError(f"it needs the shell: {', '.join(features)}")
            runner = words[:i]
            if runner and not (len(runner) == 1 and PYTHON.match(PurePath(runner[0]).name)):
                # timeout, flock, nice, python -W ...: what they add to the line (a time
                # limit, a lock, a priority, warnings as errors) a schedule cannot keep.
                if PYTHON.match(PurePath(runner[-1]).name):
                    runner = runner[:-1]  # timeout 60 python: named by what it adds
                raise ValueError(
                    f"it runs manage.py through '{' '.join(runner)}', which a schedule of "
                    "the command task cannot do: it calls the command itself"
                )
            tail = words[i + 1 :]
            if tail[0].startswith("-"):
                raise ValueError("manage.py is called without a command")
            return cron, tail[0], tail[1:], shape
    raise ValueError("it runs no manage.py command")


# The words of the shapes kept, as the shell's tokens (quotes kept) give them.
CD, AND, TO_FILE, APPEND, ERRORS_TOO = "cd", "&&", ">", ">>", ["2", ">&", "1"]


def _kept_shape(command: str) -> tuple[str, Shape]:
    """``command`` without the shell around its one command that a schedule keeps the
    meaning of, and that shell: exactly ``[USER] cd DIR && COMMAND [> FILE | >> FILE]
    [2>&1]``, each part optional. Anything else is left as it is (and its shell found and
    named by ``_shell_features``)."""
    tokens = _tokens(command)
    if tokens is None:
        return command, Shape()
    start, end = 0, len(tokens)
    user = tokens[:1] if len(tokens) > 1 and not _is_path_or_program(tokens[0]) else []
    directory = None
    at = len(user)
    if tokens[at : at + 1] == [CD] and tokens[at + 2 : at + 3] == [AND]:
        target = tokens[at + 1]
        if _plain_word(target) and not target.startswith("-"):
            directory, start = target, at + 3
    # "2>&1" as one word: "2 >&1" gives the same tokens and passes "2" to the command.
    errors_too = tokens[end - 3 : end] == ERRORS_TOO and bool(
        re.search(r"(?<!\S)2>&1(?!\S)", command)
    )
    if errors_too:
        end -= 3
    output = None
    operator = tokens[end - 2] if end - 2 > start else ""
    # A number before the operator would be a stream's (1> FILE, 2> FILE): not a shape kept.
    stream = operator and tokens[end - 3].isdigit()
    if operator in (TO_FILE, APPEND) and _plain_word(tokens[end - 1]) and not stream:
        output = shlex.split(tokens[end - 1])[0]
        end -= 2
    if (directory, output, errors_too) == (None, None, False):
        return command, Shape()
    kept = " ".join([*user, *tokens[start:end]])
    return kept, Shape(directory, output, errors_too)


def _tokens(command: str) -> list[str] | None:
    """The shell's tokens of ``command`` (quotes kept: a quoted ``;`` is a word, not an
    operator; comments dropped); None if its quoting cannot be read."""
    lexer = shlex.shlex(command, posix=False, punctuation_chars=PUNCTUATION)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return None


def _plain_word(token: str) -> bool:
    """A word that means what it says to the shell: no operator, no expansion, no ``%``."""
    return not set(token) <= set(PUNCTUATION) and not _shell_features(token)


def _shell_features(command: str) -> list[str]:
    """Each token of ``command`` that only a shell (or cron's ``%``) gives a meaning, and
    what it does: empty when the words mean what they say."""
    lexer = shlex.shlex(command, posix=False, punctuation_chars=PUNCTUATION)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)  # quotes kept: a quoted ";" is a word, not an operator
    except ValueError as exc:
        return [f"its quoting cannot be read ({exc})"]
    found: list[tuple[str, str]] = []  # (the tokens as written, what they do)
    before_program = True  # NAME=value words before the program set its environment
    i = 0
    while i < len(tokens):
        token, following = tokens[i], tokens[i + 1 :]
        operator = set(token) <= set(PUNCTUATION)
        end = i  # the last token of what is found here
        if operator and ("<" in token or ">" in token):
            fd = tokens[i - 1] if i and tokens[i - 1].isdigit() else ""
            target = following[0] if following else ""
            gap = "" if token.endswith("&") else " "  # 2>&1
            found.append((f"{fd}{token}{gap}{target}".rstrip(), "a redirection"))
            end = i + 1
        elif operator:
            what = OPERATORS.get(token, "a subshell" if token in "()" else "a shell operator")
            found.append((token, what))
        elif token.endswith("$") and following and following[0].startswith("("):
            # $( ... ): shlex gives "...$", "(", the words inside, ")".
            end = _first(tokens, i + 2, lambda t: t.startswith(")"))
            found.append(("$(" + " ".join(tokens[i + 2 : end]) + ")", "a command substitution"))
        elif "`" in token and not _quoted(token, "'"):
            # The closing backtick may be in a later token: `date +%F`.
            if token.count("`") % 2:
                end = _first(tokens, i + 1, lambda t: "`" in t)
            found.append((" ".join(tokens[i : end + 1]), "a command substitution"))
        elif "$" in token and not _quoted(token, "'") and (variable := VARIABLE.search(token)):
            found.append((variable.group(), "a variable"))
        elif before_program and ASSIGNMENT.match(token):
            found.append((token, "sets a variable for the command"))
        elif set(token) & set("*?[") and not (_quoted(token, "'") or _quoted(token, '"')):
            found.append((token, "a pattern the shell expands to file names"))
        elif token.startswith("~"):
            found.append((token, "the shell expands ~ to a home directory"))
        elif _is_path_or_program(token):
            before_program = False
        i = end + 1
    if CRON_PERCENT.search(command):
        found.append(("%", "cron sends what follows to the command's input; \\% is a percent sign"))
    return [f"'{text}' ({what})" for text, what in found]


def _first(tokens: list[str], start: int, found: Callable[[str], bool]) -> int:
    """The index of the first token from ``start`` on that is ``found``, else the last."""
    return next((j for j in range(start, len(tokens)) if found(tokens[j])), len(tokens) - 1)


def _quoted(token: str, quote: str) -> bool:
    return len(token) >= 2 and token[0] == token[-1] == quote


def _is_path_or_program(word: str) -> bool:
    """Whether the first word of a command looks like what runs, not a user name (a user
    column holds a bare name; a program is a path, an interpreter or an entry point)."""
    return (
        "/" in word
        or word in ("cd", "python", "python3", "env", "nice", "flock", "timeout")
        or word.startswith("python")
        or PurePath(word).name in DJANGO_ENTRY_POINTS
    )
