"""A stand-in OpenAI-compatible chat-completions endpoint for the REST add
tests (stdlib only). It speaks the real wire format: POST
/v1/chat/completions with a JSON body, answering
{"choices": [{"message": {"role": "assistant", "content": ...}}]}.

Modes, set with POST /control {"mode": ...}:
  ok       answers {"facts": [...]} built from the user lines it was sent
  error    answers HTTP 500
  slow     sleeps 5 s before answering (longer than the test's timeout)
  garbage  answers prose that holds no list of facts
GET /last returns the last chat request (body and Authorization header).
Prints "listening <port>" once ready.
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"mode": "ok", "last": None}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/last":
            self.reply(200, STATE["last"] or {})
        else:
            self.reply(404, {"error": "not found"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/control":
            STATE["mode"] = body["mode"]
            self.reply(200, {"mode": STATE["mode"]})
            return
        if self.path != "/v1/chat/completions":
            self.reply(404, {"error": "not found"})
            return
        STATE["last"] = {"body": body, "authorization": self.headers.get("Authorization")}
        mode = STATE["mode"]
        if mode == "error":
            self.reply(500, {"error": {"message": "model overloaded"}})
            return
        if mode == "slow":
            time.sleep(5)
        conversation = body["messages"][-1]["content"]
        facts = []
        for line in conversation.splitlines():
            if line.startswith("user: "):
                text = line[len("user: "):].strip().rstrip(".")
                if text.lower().startswith("i work at "):
                    facts.append("Works at " + text[len("i work at "):])
                else:
                    facts.append(text)
        content = "I could not find anything." if mode == "garbage" else "```json\n" + json.dumps({"facts": facts}) + "\n```"
        self.reply(200, {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        })


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("listening", server.server_address[1], flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    sys.exit(0)
