"""The official openai client against a recording server, unchanged: sync, async, streaming,
chat completions, completions and the Responses API. Prints one JSON object with what each call
returned; tests/openai_client.rs checks it and the recording.

Usage: python openai_client.py <base_url>
"""

import asyncio
import json
import sys

import openai

base = sys.argv[1]
out = {"version": openai.__version__}
client = openai.OpenAI(base_url=base, api_key="sk-not-a-real-key", max_retries=0)

r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "sync"}])
out["sync"] = r.choices[0].message.content

stream = client.chat.completions.create(
    model="m", messages=[{"role": "user", "content": "sync stream"}], stream=True,
    stream_options={"include_usage": True},
)
out["sync_stream"] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

r = client.completions.create(model="m", prompt="legacy")
out["completions"] = r.choices[0].text

r = client.responses.create(model="m", input="responses", instructions="be brief")
out["responses"] = r.output_text

with client.responses.stream(model="m", input="responses stream") as s:
    out["responses_stream"] = "".join(e.delta for e in s if e.type == "response.output_text.delta")

models = client.models.list()
out["models"] = [m.id for m in models.data]


async def main():
    a = openai.AsyncOpenAI(base_url=base, api_key="sk-not-a-real-key", max_retries=0)
    r = await a.chat.completions.create(model="m", messages=[{"role": "user", "content": "async"}])
    out["async"] = r.choices[0].message.content
    s = await a.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "async stream"}], stream=True
    )
    parts = []
    async for c in s:
        if c.choices:
            parts.append(c.choices[0].delta.content or "")
    out["async_stream"] = "".join(parts)
    # Several at once on one client, as an agent loop with parallel tool calls would.
    rs = await asyncio.gather(*[
        a.chat.completions.create(model="m", messages=[{"role": "user", "content": f"gather {i}"}])
        for i in range(8)
    ])
    out["gather"] = [r.choices[0].message.content for r in rs]
    await a.close()


asyncio.run(main())
print(json.dumps(out))
