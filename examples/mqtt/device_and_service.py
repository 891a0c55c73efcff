"""An MQTT device and a NATS service talking through Rillet's mqtt {} listener.

    python examples/mqtt/device_and_service.py                # runs its own Rillet server (in-process)
    python examples/mqtt/device_and_service.py --nats nats://127.0.0.1:4222 --mqtt 1883   # an existing one

The device (paho-mqtt, MQTT 3.1.1) publishes ``sensors/dev1/temp`` readings at QoS 1 and listens on
``devices/dev1/cmd``. The service (nats-py) subscribes to ``sensors.*.temp`` -- the same topic seen as a NATS
subject -- and, when a reading is too high, publishes a command to ``devices.dev1.cmd``, which the device
receives as an MQTT message. The device's readings are also kept in a JetStream stream.
"""
from __future__ import annotations

import argparse
import asyncio
import queue
import tempfile

import nats
import paho.mqtt.client as mqtt


async def service(nc: nats.NATS) -> None:
    async def on_reading(msg) -> None:
        device = msg.subject.split(".")[1]
        temp = float(msg.data)
        print(f"service: {device} reports {temp} (subject {msg.subject}, MQTT QoS {msg.headers.get('Nmqtt-Pub')})")
        if temp > 30:
            await nc.publish(f"devices.{device}.cmd", b"fan on")
    await nc.subscribe("sensors.*.temp", cb=on_reading)
    js = nc.jetstream()
    await js.add_stream(name="READINGS", subjects=["sensors.>"])


def device(port: int, commands: queue.Queue) -> mqtt.Client:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="dev1", clean_session=False)
    c.on_message = lambda cl, u, m: commands.put((m.topic, m.payload.decode()))
    c.connect("127.0.0.1", port)
    c.loop_start()
    c.subscribe("devices/dev1/cmd", qos=1)
    return c


async def demo(nats_url: str, mqtt_port: int) -> None:
    nc = await nats.connect(nats_url)
    await service(nc)
    await nc.flush()
    commands: queue.Queue = queue.Queue()
    dev = await asyncio.get_running_loop().run_in_executor(None, device, mqtt_port, commands)
    await asyncio.sleep(0.5)
    for temp in (21.5, 28.0, 31.5):
        dev.publish("sensors/dev1/temp", str(temp), qos=1)
        await asyncio.sleep(0.3)
    topic, cmd = await asyncio.get_running_loop().run_in_executor(None, commands.get, True, 5)
    print(f"device: got {cmd!r} on {topic}")
    info = await nc.jetstream().stream_info("READINGS")
    print(f"stream READINGS holds {info.state.messages} readings")
    dev.loop_stop()
    dev.disconnect()
    await nc.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nats", help="the NATS URL of a running server (with mqtt {} and JetStream)")
    ap.add_argument("--mqtt", type=int, default=1883, help="its MQTT port")
    args = ap.parse_args()
    if args.nats:
        await demo(args.nats, args.mqtt)
        return
    from rillet.app.embed import run_server
    from rillet.config.options_builder import load_string
    store = tempfile.mkdtemp(prefix="rillet-mqtt-example-")
    opts = load_string(f'listen: 127.0.0.1:-1\nserver_name: example\njetstream {{ store_dir: "{store}" }}\n'
                       'mqtt { listen: 127.0.0.1:-1 }\n')
    async with run_server(opts) as srv:
        await demo(srv.client_url, srv.mqtt.addr[1])


if __name__ == "__main__":
    asyncio.run(main())
