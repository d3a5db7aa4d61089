#!/usr/bin/python3
"""Approach (c): a keep-connected client as Home-Assistant-style integrations write it, with
bleak + bleak-retry-connector (PyPI; installed on the host by bench.sh into
.build-bench/pylib, put on PYTHONPATH).  Runs against the system bus, adapter hci0:

  loop:
    the BLEDevice of the bonded wearable from BlueZ's objects on hci0 (get_device_by_adapter);
      only if BlueZ has none: BleakScanner.find_device_by_address(ADDR, adapter="hci0")
    establish_connection(BleakClientWithServiceCache, …)             (retries; a Connect() that
                                                                      is pending when the wearable
                                                                      returns completes at once)
    start_notify(0x2A37)                                              (bleak: StartNotify)
    wait for the disconnected callback
Every notification (wall clock at the callback) and every attempt is logged as a JSON line."""
import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import time

from bleak import BleakScanner
from bleak_retry_connector import (BleakClientWithServiceCache, close_stale_connections_by_address,
                                   establish_connection)
from bleak_retry_connector.bluez import get_device_by_adapter

HR_MEAS = "00002a37-0000-1000-8000-00805f9b34fb"


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("address")
    p.add_argument("--adapter", default="hci0")
    p.add_argument("--log", default="/dev/stdout")
    a = p.parse_args()
    logf = open(a.log, "a", buffering=1)

    def log(kind, **kw):
        logf.write(json.dumps({"wall": time.time(), "kind": kind, **kw}) + "\n")

    logging.basicConfig(level=logging.DEBUG if (os.environ.get("BENCH_DEBUG") or os.environ.get("BED_X_DEBUG_MONITOR")) else logging.INFO, format="%(created).3f %(name)s %(levelname)s %(message)s")
    logging.getLogger("bleak_retry_connector").setLevel(logging.DEBUG)
    log("started")
    while True:
        try:
            dev = await get_device_by_adapter(a.address, a.adapter)
            if dev is None:
                log("scan")
                dev = await BleakScanner.find_device_by_address(a.address, timeout=30, adapter=a.adapter)
                if dev is None:
                    continue
                log("seen")
            gone = asyncio.Event()
            log("connect")
            client = await establish_connection(BleakClientWithServiceCache, dev, "wearable",
                                                disconnected_callback=lambda _c: gone.set(),
                                                max_attempts=4)
            log("connected")
            await client.start_notify(HR_MEAS, lambda _c, data: log("notification", value=bytes(data).hex()))
            log("subscribed")
            await gone.wait()
            log("disconnected")
        except Exception as e:  # noqa: BLE001 - a keeper keeps going
            log("error", error=f"{type(e).__name__}: {e}")
            # as Home Assistant does before a new attempt: drop a half-open link BlueZ still holds
            with contextlib.suppress(Exception):
                await close_stale_connections_by_address(a.address)
            await asyncio.sleep(1)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
