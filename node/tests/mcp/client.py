"""A real MCP client (the Python `mcp` package) driving `termesh mcp`:
lists the tools, creates a session running a scripted agent, waits for it
to ask, reads the question, answers, waits for the end and reads the
result; errors come back as tool errors carrying the termesh code.

Usage: client.py TERMESH URL TOKEN
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

TOOLS = ["create_session", "grep", "kill_session", "list_sessions", "read", "screen", "send", "wait"]
AGENT = (
    "echo 'planning the release'; sleep 0.5; "
    "printf 'Deploy to production? [y/N] '; read a; echo \"deployed: $a\"; sleep 0.3"
)


def ok(result):
    assert not result.is_error, result
    return result.content[0].text


def failed(result):
    assert result.is_error, result
    return result.content[0].text


async def main():
    termesh, url, token = sys.argv[1:4]
    params = StdioServerParameters(
        command=termesh, args=["mcp", "--url", url, "--token", token]
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            tools = (await s.list_tools()).tools
            assert sorted(t.name for t in tools) == TOOLS, [t.name for t in tools]
            for t in tools:
                assert t.description, t
                assert t.input_schema.get("type") == "object", t
            wait_props = next(t for t in tools if t.name == "wait").input_schema["properties"]
            assert {"session", "until", "timeout_ms"} <= set(wait_props), wait_props

            created = json.loads(
                ok(await s.call_tool("create_session", {"command": ["sh", "-c", AGENT], "name": "mcp-agent"}))
            )
            sid = created["id"]
            asked = json.loads(
                ok(await s.call_tool("wait", {"session": sid, "until": ["waiting"], "timeout_ms": 60000}))
            )
            assert asked["state"] == "waiting", asked
            question = json.loads(ok(await s.call_tool("read", {"session": sid})))
            assert question["text"].endswith("Deploy to production? [y/N]"), question
            listed = json.loads(ok(await s.call_tool("list_sessions", {"state": "waiting"})))
            assert [x["id"] for x in listed] == [sid], listed
            assert listed[0]["waiting_for"] == "Deploy to production? [y/N]", listed
            assert "Deploy to production?" in ok(await s.call_tool("screen", {"session": sid}))

            # Answered by name; then the end, and exactly the new text.
            assert ok(await s.call_tool("send", {"session": "mcp-agent", "text": "y"})) == "ok"
            ended = json.loads(
                ok(await s.call_tool("wait", {"session": sid, "until": ["exited"], "timeout_ms": 60000}))
            )
            assert ended["state"] == "exited", ended
            after = json.loads(ok(await s.call_tool("read", {"session": sid, "since_seq": question["seq"]})))
            assert after["text"] == "y\ndeployed: y\n", after

            found = json.loads(ok(await s.call_tool("grep", {"pattern": "^deployed: ", "context": 1})))
            assert [(h["session"], h["line"], h["before"]) for h in found["hits"]] == [
                (sid, "deployed: y", ["Deploy to production? [y/N] y"])
            ], found
            assert failed(await s.call_tool("grep", {"pattern": "("})).startswith("bad_request"), "a bad regex"

            # Errors are tool errors, the termesh code first.
            late = failed(await s.call_tool("send", {"session": sid, "text": "late"}))
            assert late.startswith("exited"), late
            sleeper = json.loads(ok(await s.call_tool("create_session", {"command": ["sleep", "1000"]})))
            timed_out = failed(
                await s.call_tool("wait", {"session": sleeper["id"], "until": ["waiting"], "timeout_ms": 300})
            )
            assert timed_out.startswith("timeout"), timed_out
            missing = failed(await s.call_tool("read", {"session": "no-such-session"}))
            assert "no-such-session" in missing, missing
            bad = failed(await s.call_tool("send", {"session": sid, "text": "x", "when": "later"}))
            assert bad.startswith("bad_request"), bad
            assert ok(await s.call_tool("kill_session", {"session": sleeper["id"], "signal": "KILL"})) == "ok"
            gone = json.loads(
                ok(await s.call_tool("wait", {"session": sleeper["id"], "until": ["exited"], "timeout_ms": 60000}))
            )
            assert gone["state"] == "exited", gone
    print("mcp client: every check passed")


asyncio.run(main())
