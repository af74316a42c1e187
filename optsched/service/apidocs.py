"""``GET /docs``: the HTTP API as one self-contained HTML page, rendered on the
server from the app's OpenAPI document.

FastAPI's own /docs loads Swagger UI's script and styles from a CDN, so on a
machine without internet access it was a blank page. This page has no script
and no external reference (tests/test_service_ops.py checks that no URL in it
names another host): every endpoint with its parameters, body and answers, and
every schema with its fields' types and descriptions (units included), linked
to each other. The machine-readable document stays at ``/openapi.json``.
"""

from __future__ import annotations

from html import escape

METHODS = ("get", "post", "put", "patch", "delete")

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;
color:#1b1b1b;line-height:1.45}
h1{margin-bottom:.2rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2.5rem}
code,.path{font-family:ui-monospace,Menlo,Consolas,monospace}
.op{border:1px solid #ddd;border-radius:6px;padding:.6rem .9rem;margin:1rem 0}
.method{display:inline-block;min-width:4.5rem;font-weight:700;text-transform:uppercase}
.get{color:#1f6feb}.post{color:#1a7f37}.patch{color:#9a6700}.delete{color:#cf222e}.put{color:#8250df}
table{border-collapse:collapse;margin:.4rem 0;width:100%}th,td{border:1px solid #e3e3e3;padding:.25rem .5rem;
text-align:left;vertical-align:top}th{background:#f6f8fa}.muted{color:#666}
"""


def render(spec: dict) -> str:
    """The page for an OpenAPI 3 document (``app.openapi()``)."""
    info = spec.get("info", {})
    ops = [(path, method, op) for path, item in spec.get("paths", {}).items()
           for method, op in item.items() if method in METHODS]
    schemas = spec.get("components", {}).get("schemas", {})
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>{escape(info.get('title', 'API'))} {escape(str(info.get('version', '')))} — HTTP API</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{escape(info.get('title', 'API'))} <span class=muted>{escape(str(info.get('version', '')))}</span></h1>",
        f"<p>{escape(info.get('description', ''))}</p>",
        "<p>The OpenAPI document: <a href='openapi.json'>openapi.json</a>.</p>",
        "<h2>Endpoints</h2><ul>",
        *(f"<li><a href='#{_op_id(p, m)}'><span class='method {m}'>{m}</span> <span class=path>{escape(p)}</span></a>"
          f" <span class=muted>{escape(op.get('summary', ''))}</span></li>" for p, m, op in ops),
        "</ul>",
        *(_operation(p, m, op) for p, m, op in ops),
        "<h2>Schemas</h2>",
        *(_schema(name, s) for name, s in schemas.items()),
        "</body></html>",
    ]
    return "\n".join(parts)


def _op_id(path: str, method: str) -> str:
    return "op-" + method + "-" + "".join(c if c.isalnum() else "-" for c in path).strip("-")


def _operation(path: str, method: str, op: dict) -> str:
    out = [f"<div class=op id='{_op_id(path, method)}'><span class='method {method}'>{method}</span> "
           f"<span class=path>{escape(path)}</span>"]
    if op.get("summary"):
        out.append(f"<p><b>{escape(op['summary'])}</b></p>")
    if op.get("description"):
        out.append(f"<p>{escape(op['description'])}</p>")
    params = op.get("parameters", [])
    if params:
        out.append("<table><tr><th>parameter</th><th>in</th><th>type</th><th>description</th></tr>")
        for p in params:
            req = " (required)" if p.get("required") else ""
            out.append(f"<tr><td><code>{escape(p.get('name', ''))}</code>{req}</td><td>{escape(p.get('in', ''))}</td>"
                       f"<td>{_type(p.get('schema', {}))}</td><td>{escape(p.get('description', ''))}</td></tr>")
        out.append("</table>")
    body = op.get("requestBody")
    if body:
        schema = body.get("content", {}).get("application/json", {}).get("schema", {})
        out.append(f"<p>Body (JSON{', required' if body.get('required') else ''}): {_type(schema)}</p>")
    responses = op.get("responses", {})
    if responses:
        out.append("<table><tr><th>status</th><th>answer</th><th>description</th></tr>")
        for code, r in responses.items():
            schema = r.get("content", {}).get("application/json", {}).get("schema")
            out.append(f"<tr><td>{escape(str(code))}</td><td>{_type(schema) if schema else ''}</td>"
                       f"<td>{escape(r.get('description', ''))}</td></tr>")
        out.append("</table>")
    out.append("</div>")
    return "\n".join(out)


def _schema(name: str, s: dict) -> str:
    out = [f"<h3 id='schema-{escape(name)}'>{escape(name)}</h3>"]
    if s.get("description"):
        out.append(f"<p>{escape(s['description'])}</p>")
    props = s.get("properties", {})
    if props:
        required = set(s.get("required", []))
        out.append("<table><tr><th>field</th><th>type</th><th>description</th></tr>")
        for field, p in props.items():
            req = " (required)" if field in required else ""
            default = f" Default: <code>{escape(repr(p['default']))}</code>." if "default" in p else ""
            out.append(f"<tr><td><code>{escape(field)}</code>{req}</td><td>{_type(p)}</td>"
                       f"<td>{escape(p.get('description', ''))}{default}</td></tr>")
        out.append("</table>")
    elif s:
        out.append(f"<p>{_type(s)}</p>")
    return "\n".join(out)


def _type(s: dict | None) -> str:
    """A schema as short HTML: a link for a reference, list[...]/dict[...] for containers."""
    if not s:
        return "any"
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[-1]
        return f"<a href='#schema-{escape(name)}'>{escape(name)}</a>"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in s:
            return " | ".join(_type(x) for x in s[key])
    if "enum" in s:
        return " | ".join(f"<code>{escape(repr(v))}</code>" for v in s["enum"])
    if "const" in s:
        return f"<code>{escape(repr(s['const']))}</code>"
    kind = s.get("type", "any")
    if kind == "array":
        return f"list[{_type(s.get('items'))}]"
    if kind == "object" and isinstance(s.get("additionalProperties"), dict):
        return f"dict[str, {_type(s['additionalProperties'])}]"
    return escape(str(kind))


__all__ = ["render"]
