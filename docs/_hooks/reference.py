"""MkDocs hook: the reference pages, generated from the code at every build.

- ``reference/cli.md``: every command and option of the ``optsched`` command
  line, read from the typer app (its click command tree).
- ``reference/http.md`` and ``reference/openapi.json``: the HTTP API from the
  FastAPI app's ``openapi()``, rendered as Markdown (no script, no CDN: the
  page works offline).
- ``reference/python.md``: one mkdocstrings block per name in the ``__all__``
  of the public modules, so a new export gets its page without editing docs.

Nothing here is written to disk: the pages exist only in the build, so they
cannot go stale.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from typing import Any

from markdown import Extension
from markdown.preprocessors import Preprocessor
from mkdocs.plugins import event_priority

PUBLIC_MODULES = [
    ("optsched", "The package: solve a snapshot, parse it, simulate, allocate rounds."),
    ("optsched.allocator", "The round-based allocator (see Rounds and placement)."),
    ("optsched.sim", "The simulator (see Simulate and traces)."),
    ("optsched.service", "Sessions in-process and the HTTP service (see Embedding and the service)."),
    ("optsched.client", "The HTTP client, with the in-process names."),
    ("optsched.sweep", "Sweeps (see Sweeps and reports)."),
    ("optsched.report", "The HTML report of a sweep."),
    ("optsched.predict", "Duration predictions for lucid, qssf and allox."),
    ("optsched.runtime.job", "The job library of `optsched run`."),
    ("optsched.bench", "The bench behind `optsched bench`."),
]


@event_priority(100)  # before mkdocstrings builds its Markdown from the same extension list
def on_config(config):
    config.markdown_extensions.append(DoctestFences())
    return config


def on_files(files, config):
    from mkdocs.structure.files import File

    pages = {
        "reference/cli.md": cli_markdown(),
        "reference/http.md": http_markdown(openapi_spec()),
        "reference/openapi.json": json.dumps(openapi_spec(), indent=1, sort_keys=True),
        "reference/python.md": python_markdown(),
    }
    for path, content in pages.items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=content))
    return files


# ---------------------------------------------------------------- CLI


def cli_markdown() -> str:
    import typer.main

    from optsched.cli import app

    root = typer.main.get_command(app)  # typer's own click (typer._click), so no isinstance on click's classes
    out = [
        "# Command line",
        "",
        "Generated from the `optsched` typer app at build time: every command and",
        "option, with its help text and default. `optsched COMMAND --help` prints",
        "the same in a terminal.",
        "",
    ]
    ctx = root.context_class(root, info_name="optsched")
    _command_md(root, ctx, ["optsched"], out, level=2)
    return "\n".join(out) + "\n"


def _command_md(cmd, ctx, path: list[str], out: list[str], level: int) -> None:
    title = " ".join(path)
    out += [f"{'#' * level} `{title}`", ""]
    if cmd.help:
        out += [inspect.cleandoc(cmd.help).replace("\b\n", ""), ""]
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    out += ["```text", f"{title} {usage}".rstrip(), "```", ""]
    args = [p for p in cmd.params if p.param_type_name == "argument"]
    opts = [p for p in cmd.params if p.param_type_name == "option" and not getattr(p, "hidden", False)]
    if args:
        out += ["| argument | required | help |", "|---|---|---|"]
        for a in args:
            out.append(f"| `{(a.metavar or a.name or '').upper()}` | {'yes' if a.required else 'no'} | {_cell(getattr(a, 'help', '') or '')} |")
        out.append("")
    if opts:
        out += ["| option | type | default | help |", "|---|---|---|---|"]
        for o in opts:
            names = ", ".join(f"`{n}`" for n in o.opts + o.secondary_opts)
            out.append(f"| {names} | {_type_name(o, ctx)} | {_default(o)} | {_cell(o.help or '')} |")
        out.append("")
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            sub_ctx = sub.context_class(sub, info_name=name, parent=ctx)
            _command_md(sub, sub_ctx, path + [name], out, level + 1 if level < 4 else level)


def _type_name(o, ctx) -> str:
    if o.is_flag:
        return "flag"
    shown = o.display_type(ctx) if hasattr(o, "display_type") else getattr(getattr(o, "type", None), "name", "")
    return _cell(str(shown).strip("<>") or "text")


def _default(o) -> str:
    d = o.default
    if callable(d) or d is None or d == "" or (o.is_flag and d is False) or d == () or d == []:
        return ""
    return f"`{_cell(str(d))}`"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


# ---------------------------------------------------------------- HTTP


_SPEC: dict | None = None


def openapi_spec() -> dict:
    global _SPEC
    if _SPEC is None:
        from optsched.service import create_app

        _SPEC = create_app(":memory:").openapi()
    return _SPEC


def http_markdown(spec: dict) -> str:
    info = spec.get("info", {})
    out = [
        "# HTTP API",
        "",
        f"Generated at build time from the service's OpenAPI document ({info.get('title', '')} "
        f"{info.get('version', '')}, OpenAPI {spec.get('openapi', '')}); the same document is served at",
        "`/openapi.json` by `optsched serve` and is [here as a file](openapi.json).",
        "Errors are `{\"detail\": one line, \"field\": ...}` (see [Embedding and the service](../guide/embedding.md)).",
        "",
    ]
    if info.get("description"):
        out += [info["description"], ""]
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            out += _operation_md(method.upper(), path, op)
    schemas = spec.get("components", {}).get("schemas", {})
    if schemas:
        out += ["## Schemas", ""]
        for name in sorted(schemas):
            out += _schema_md(name, schemas[name])
    return "\n".join(out) + "\n"


def _operation_md(method: str, path: str, op: dict) -> list[str]:
    out = [f"## `{method} {path}`", ""]
    if op.get("summary"):
        out += [f"**{op['summary']}**", ""]
    if op.get("description"):
        out += [op["description"].strip(), ""]
    params = op.get("parameters", [])
    if params:
        out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for p in params:
            out.append(f"| `{p['name']}` | {p.get('in', '')} | {_type(p.get('schema', {}))} | "
                       f"{'yes' if p.get('required') else 'no'} | {_cell(p.get('description', ''))} |")
        out.append("")
    body = op.get("requestBody")
    if body:
        for ctype, media in body.get("content", {}).items():
            req = "required" if body.get("required") else "optional"
            out += [f"Request body ({ctype}, {req}): {_type(media.get('schema', {}))}", ""]
    responses = op.get("responses", {})
    if responses:
        out += ["| status | description | body |", "|---|---|---|"]
        for code, resp in responses.items():
            schema = next(iter(resp.get("content", {}).values()), {}).get("schema", {})
            out.append(f"| {code} | {_cell(resp.get('description', ''))} | {_type(schema) if schema else ''} |")
        out.append("")
    return out


def _schema_md(name: str, schema: dict) -> list[str]:
    out = [f"### {name}", ""]
    if schema.get("description"):
        out += [_cell(schema["description"]), ""]
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    if props:
        out += ["| field | type | required | default | description |", "|---|---|---|---|---|"]
        for field, sub in props.items():
            default = f"`{_cell(json.dumps(sub['default']))}`" if "default" in sub else ""
            out.append(f"| `{field}` | {_type(sub)} | {'yes' if field in required else 'no'} | {default} | "
                       f"{_cell(sub.get('description', ''))} |")
        out.append("")
    elif "enum" in schema:
        out += ["One of " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".", ""]
    elif schema:
        out += [f"Type: {_type(schema)}", ""]
    return out


def _type(s: dict[str, Any]) -> str:
    if not s:
        return "any"
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in s:
            return " \\| ".join(_type(x) for x in s[key])
    t = s.get("type")
    if t == "array":
        return f"list[{_type(s.get('items', {}))}]"
    if t == "object" or "additionalProperties" in s:
        extra = s.get("additionalProperties")
        if isinstance(extra, dict):
            return f"dict[str, {_type(extra)}]"
        return "object"
    if "enum" in s:
        return " \\| ".join(f"`{v}`" for v in s["enum"])
    if "const" in s:
        return f"`{s['const']}`"
    return str(t or "any")


# ---------------------------------------------------------------- Python


def python_markdown() -> str:
    out = [
        "# Python API",
        "",
        "Generated at build time from the docstrings of every name in the `__all__`",
        "of the public modules below (mkdocstrings). The guides show these in use:",
        "[Solve a snapshot](../guide/solve.md#from-python), [Rounds and placement](../guide/rounds.md),",
        "[Embedding and the service](../guide/embedding.md).",
        "",
    ]
    seen: dict[str, str] = {}
    for modname, blurb in PUBLIC_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ImportError as exc:  # an extra that is not installed: say so on the page
            out += [f"## `{modname}`", "", f"Not importable in the build environment: {exc}", ""]
            continue
        out += [f"## `{modname}`", "", blurb, ""]
        for name in getattr(mod, "__all__", []):
            target = _defining_path(mod, name)
            if target and target in seen:  # one object, one anchor: re-exports point to it
                out += [f"`{modname}.{name}`: the same object as [`{seen[target]}`][{target}].", ""]
            elif target:
                seen[target] = f"{modname}.{name}"
                out += [f"::: {target}", "    options:", "      heading_level: 3", ""]
    return "\n".join(out) + "\n"


def _defining_path(mod, name: str) -> str | None:
    """``module.qualname`` of a documented class or function (constants are skipped),
    only when its module lives under optsched/ (griffe reads sources from there)."""
    obj = getattr(mod, name, None)
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return None
    module = getattr(obj, "__module__", "") or ""
    if module.split(".")[0] != "optsched":
        return None
    source = inspect.getsourcefile(obj) or ""
    if "/optsched/" not in source.replace("\\", "/"):
        return None
    return f"{module}.{obj.__qualname__}"


# ---------------------------------------------------------------- doctests in docstrings


class DoctestFences(Extension):
    """Docstrings show examples as ``>>>`` lines; Markdown reads those as nested
    block quotes. Wrap each run of them (and the output lines after them) in a
    ``pycon`` fence. Lines inside an existing fence are left alone."""

    def extendMarkdown(self, md):
        md.preprocessors.register(_DoctestPreprocessor(md), "optsched_doctest", 35)  # before fences (25-30)


class _DoctestPreprocessor(Preprocessor):
    FENCE = re.compile(r"^\s*(```|~~~)")
    PROMPT = re.compile(r"^(\s*)>>> ")

    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        in_fence, i = False, 0
        while i < len(lines):
            line = lines[i]
            if self.FENCE.match(line):
                in_fence = not in_fence
            m = None if in_fence else self.PROMPT.match(line)
            if not m:
                out.append(line)
                i += 1
                continue
            indent = m.group(1)
            block = []
            while i < len(lines) and lines[i].strip() and not self.FENCE.match(lines[i]):
                block.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
                i += 1
            out += ["", indent + "```pycon", *(indent + b for b in block), indent + "```", ""]
        return out
