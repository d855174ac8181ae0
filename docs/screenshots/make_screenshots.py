"""Screenshots of the console for the README: a real broker with sample data (confluent-kafka),
``strom console`` on a free port, each page shot by headless Chromium (Debian's ``chromium``).

    PYTHONPATH=src python docs/screenshots/make_screenshots.py docs/screenshots
"""
import json, subprocess, sys, tempfile, time, socket
from pathlib import Path
from strom.testing.broker_process import BrokerProcess, free_port
from confluent_kafka import Producer, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
out = Path(sys.argv[1])
d = Path(tempfile.mkdtemp())
with BrokerProcess(d / "data", overrides=["group.initial.rebalance.delay.ms=0"]) as b:
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in a.create_topics([NewTopic("orders", 6, 1), NewTopic("payments", 3, 1), NewTopic("audit-log", 1, 1)]).values(): f.result(30)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(600):
        p.produce("orders", json.dumps({"order_id": 1000 + i, "customer": {"id": i % 37, "tier": ["gold", "basic"][i % 2]}, "total": round(12.5 + i * 0.37, 2)}).encode(), key=f"c-{i % 37}".encode(), partition=i % 6, headers={"source": b"web"})
    for i in range(200):
        p.produce("payments", json.dumps({"payment": i, "ok": True}).encode(), partition=i % 3)
    p.flush(30)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "billing"})
    c.commit(offsets=[TopicPartition("orders", i, 60 + 7 * i) for i in range(6)], asynchronous=False); c.close()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "strom", "console", "--bootstrap-server", b.bootstrap, "--port", str(port)])
    try:
        for _ in range(100):
            try: socket.create_connection(("127.0.0.1", port), 0.2).close(); break
            except OSError: time.sleep(0.1)
        for name, path in [("topic", "/topics/orders"), ("group", "/groups/billing")]:
            subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--screenshot={out / ('console-' + name + '.png')}", "--window-size=1280,860", f"http://127.0.0.1:{port}{path}"], check=True, capture_output=True, timeout=60)
            print(name, (out / ('console-' + name + '.png')).stat().st_size)
    finally:
        proc.terminate(); proc.wait(10)
