#!/usr/bin/env python3
"""Plays Fargate for an AWS emulator that runs no containers (test code, never product code).

It watches the cluster's RUNNING tasks through the ECS API, reads each task's container
overrides back with DescribeTasks, and runs exactly that command with exactly that environment
as a local process of the agenteval binary (the image's entrypoint), adding only what the
platform itself provides (credentials, PATH). When the process exits it stops the task with the
exit status in the reason; when the controller stops a task (StopTask) it terminates the process.

--drop-first N stops the first N tasks without running them: a container that never wrote its
results, as after a host failure.

--image IMAGE runs each task as a container of that image instead (`docker run`, host network so
that the emulator on 127.0.0.1 is reachable, the overrides' environment as `-e`), the way
Fargate would; a stop is `docker stop` (SIGTERM to the image's init, SIGKILL after 10 s).
--interrupt-first-after S then `docker stop`s the first task S seconds after it started and
stops it in ECS as a Spot interruption, so the controller retries what the worker had not done.

A task whose task definition has an `agenteval-init` container (a task's environment, launched
by a worker) runs as Fargate would run it, always as containers: the init container (of
--image, the agenteval image) first, with a fresh volume, then the task's own image with that
volume mounted and its entry point, user, command and environment from the task definition and
the overrides, sized as the task asks; without --image the binary itself is mounted where the
init container would have copied it. An image not on this engine is pulled first (from a
registry on this machine). The stats count such tasks per image and record how long each took
to start (pull and init).

Networks, as the task's security groups say. The machine is one VPC: an internal bridge (shared by
every stand-in, kept) whose containers cannot reach each other, nor this machine but on the workers' ports (47600-47699,
the same firewall rule the docker environments use), nor the internet. Every task runs on its
ENI's security groups (read back from the emulator's EC2): a group whose egress allows
0.0.0.0/0 also puts the container on a bridge with a route out. Workers (processes on this
machine, or containers on its network) are reached at the VPC bridge's address, which the ECS
task metadata endpoint (v4, served here; `ECS_CONTAINER_METADATA_URI_V4`) gives them as their
own, as Fargate gives each task its ENI's address.

What it cannot model: IAM (the emulator takes any credentials, so a container's reach to the
emulator is what keeps it out), security-group rules finer than "the workers' ports or
everything", DNS inside the VPC, and Fargate's image caching and start times.
"""
import argparse
import hashlib
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import boto3


def quiet(argv):
    return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def close_host():
    """This machine closed to agenteval's bridges but for the workers' ports (as the docker
    environments close it: the same two rules, each added once)."""
    for rule in (["INPUT", "-i", "agenteval+", "-j", "REJECT"],
                 ["INPUT", "-i", "agenteval+", "-p", "tcp", "--dport", "47600:47699", "-j", "ACCEPT"]):
        if quiet(["iptables", "-w", "-C"] + rule).returncode != 0:
            subprocess.run(["iptables", "-w", "-I", rule[0], "1"] + rule[1:], check=True)


def bridge(name, iface, internal):
    """A bridge of agenteval's (its interface named `agenteval…`, so the firewall rule holds it)
    whose containers cannot reach each other, shared by every stand-in on this machine (as one
    VPC holds every task) and kept, as the docker environments keep theirs; its address here."""
    if quiet(["docker", "network", "inspect", name]).returncode != 0:
        argv = ["docker", "network", "create", "-o", "com.docker.network.bridge.enable_icc=false",
                "-o", f"com.docker.network.bridge.name={iface}"]
        made = subprocess.run(argv + (["--internal"] if internal else []) + [name], capture_output=True, text=True)
        # Another stand-in may have made it first.
        if made.returncode != 0 and quiet(["docker", "network", "inspect", name]).returncode != 0:
            raise RuntimeError(f"docker network create {name}: {made.stderr.strip()}")
    out = subprocess.run(["docker", "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", name],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def metadata_server(address):
    """The ECS task metadata endpoint (v4) of every task: its network's address (`address()`)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"Networks": [{"NetworkMode": "awsvpc", "IPv4Addresses": [address()]}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--cluster", help="the cluster to watch (default: every cluster)")
    p.add_argument("--agenteval", required=True, help="the binary the image would run")
    p.add_argument("--drop-first", type=int, default=0)
    p.add_argument("--stats", help="write counts here (JSON) as it goes")
    p.add_argument("--logs", help="folder for each worker's stdout and stderr (as CloudWatch would keep them)")
    p.add_argument("--image", help="run each task as a container of this image")
    p.add_argument("--interrupt-first-after", type=float, help="docker stop the first task after this many seconds")
    p.add_argument("--duplicate", action="store_true",
                   help="start every task's worker twice, as ECS can after a lost RunTask response")
    a = p.parse_args()

    # Keep tasks RUNNING until someone calls StopTask (moto otherwise advances them itself).
    req = urllib.request.Request(
        f"{a.endpoint}/moto-api/state-manager/set-transition",
        data=json.dumps({"model_name": "ecs::task", "transition": {"progression": "manual", "times": 1000000}}).encode(),
        method="POST",
    )
    urllib.request.urlopen(req).read()

    ecs = boto3.client("ecs", endpoint_url=a.endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    platform_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_EC2_METADATA_DISABLED": "true",
        # Fargate tells every task its region; the emulator is this VPC's AWS. A launch made as
        # the scheduler makes it carries nothing else (its overrides name both for workers).
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": a.endpoint,
    }
    ec2 = boto3.client("ec2", endpoint_url=a.endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    # A container definition's `secrets` read as the execution role reads them: by ARN, from the
    # emulator's Secrets Manager, into the container's environment alone.
    sm = boto3.client("secretsmanager", endpoint_url=a.endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    # The VPC's networks, made when a task first needs them (most runs have no environments).
    vpc, internet = "fake-fargate-vpc", "fake-fargate-net"
    networks = {}

    def vpc_address():
        if not networks:
            close_host()
            networks["vpc"] = bridge(vpc, "agenteval-fvpc", internal=True)
            bridge(internet, "agenteval-fnet", internal=False)
        return networks["vpc"]
    metadata_port = metadata_server(vpc_address)
    seen = set()
    running = {}  # arn -> (process, stop_requested_at)
    in_containers = set()  # tasks run as containers (stopped with `docker stop`)
    started_at = {}  # arn -> time the worker started
    cluster_of = {}  # arn -> its cluster
    interrupted = set()
    stats = {"started": 0, "dropped": 0, "stopped_by_controller": 0, "interrupted": 0, "duplicates": 0, "exits": {},
             "images": {}, "pulls": [], "ready_seconds": []}
    task_defs = {}  # arn -> definition
    volumes = {}  # task arn -> its volumes
    extras = {}  # task arn -> the containers beside its own (its services, its network's holder)

    def task_def(arn):
        if arn not in task_defs:
            task_defs[arn] = ecs.describe_task_definition(taskDefinition=arn)["taskDefinition"]
        return task_defs[arn]

    def public(t):
        """Whether the task's security groups let it reach the internet."""
        details = {d["name"]: d["value"] for att in t.get("attachments", []) for d in att.get("details", [])}
        eni = details.get("networkInterfaceId")
        if not eni:
            return False
        groups = [g["GroupId"] for g in ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])["NetworkInterfaces"][0]["Groups"]]
        rules = ec2.describe_security_groups(GroupIds=groups)["SecurityGroups"]
        return any(r.get("CidrIp") == "0.0.0.0/0" for g in rules for e in g["IpPermissionsEgress"] for r in e.get("IpRanges", []))

    def healthy(name, check):
        """Waits for a container's ECS health check (["CMD-SHELL", command]) to pass, within what
        its interval, retries and start period allow (tried every second here)."""
        deadline = time.time() + max(check.get("startPeriod", 0) + check.get("interval", 30) * check.get("retries", 3), 10)
        while time.time() < deadline:
            if quiet(["docker", "exec", name, "sh", "-c", check["command"][1]]).returncode == 0:
                return True
            time.sleep(1)
        return False

    def env_argv(arn, t):
        """The docker commands of a task's environment (a task definition with the init
        container): None for a worker's. A compose task's services (`svc-*` containers) start
        first, in order, each waited for until healthy, all sharing one network namespace with
        the task's own container (an awsvpc task's), as its named volumes are shared."""
        td = task_def(t["taskDefinitionArn"])
        defs = td.get("containerDefinitions", [])
        init = next((c for c in defs if c["name"] == "agenteval-init"), None)
        if init is None:
            return None
        main = next(c for c in defs if c["name"] != "agenteval-init" and not c["name"].startswith("svc-"))
        services = [c for c in defs if c["name"].startswith("svc-")]
        ov = next((o for o in t["overrides"].get("containerOverrides", []) if o.get("name") == main["name"]), {})
        image = main["image"]
        t0 = time.time()
        for im in [image] + [c["image"] for c in services]:
            if quiet(["docker", "image", "inspect", im]).returncode != 0:
                p0 = time.time()
                subprocess.run(["docker", "pull", "-q", im], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
                stats["pulls"].append({"image": im, "seconds": round(time.time() - p0, 3)})
        name = container(arn)
        task_id = arn.rsplit("/", 1)[-1]
        own = volumes.setdefault(arn, [])
        # The task's volumes, as Docker volumes of this task alone.
        vol = {v["name"]: f"agenteval-w-{task_id}-{v['name']}" for v in td.get("volumes", [])}
        for v in vol.values():
            subprocess.run(["docker", "volume", "create", v], stdout=subprocess.DEVNULL, check=True)
            own.append(v)

        def mounts(c):
            return [x for m in c.get("mountPoints", []) if m["sourceVolume"] != init["mountPoints"][0]["sourceVolume"]
                    for x in ["-v", f"{vol[m['sourceVolume']]}:{m['containerPath']}" + (":ro" if m.get("readOnly") else "")]]
        mount = init["mountPoints"][0]["containerPath"]
        if a.image:
            # The init container: the agenteval image's binary into the task's volume.
            worker_vol = vol[init["mountPoints"][0]["sourceVolume"]]
            user = ["--user", init["user"]] if init.get("user") else []
            subprocess.run(["docker", "run", "--rm", "-v", f"{worker_vol}:{mount}", "--entrypoint", init["entryPoint"][0]] + user
                           + [a.image] + init.get("command", []), stdout=subprocess.DEVNULL, check=True)
            binary = ["-v", f"{worker_vol}:{mount}:ro"]
        else:
            binary = ["-v", f"{os.path.abspath(a.agenteval)}:{mount}/agenteval:ro"]
        vpc_address()
        network = ["--network", vpc]
        if services:
            # The task's network namespace, held by a container of its own.
            holder = f"{name}-net"
            extras.setdefault(arn, []).append(holder)
            subprocess.run(["docker", "run", "-d", "--name", holder, "--network", vpc, "--entrypoint", "sleep", image, "infinity"],
                           stdout=subprocess.DEVNULL, check=True)
            if public(t):
                subprocess.run(["docker", "network", "connect", internet, holder], stdout=subprocess.DEVNULL, check=True)
            network = ["--network", f"container:{holder}"]
            for c in services:
                svc = f"{name}-{c['name']}"
                extras[arn].append(svc)
                argv = ["docker", "run", "-d", "--name", svc] + network + mounts(c)
                for kv in c.get("environment", []):
                    argv += ["-e", f"{kv['name']}={kv['value']}"]
                for s in c.get("secrets", []):
                    value = sm.get_secret_value(SecretId=s["valueFrom"])["SecretString"]
                    argv += ["-e", f"{s['name']}={value}"]
                subprocess.run(argv + [c["image"]] + c.get("command", []), stdout=subprocess.DEVNULL, check=True)
                if c.get("healthCheck") and not healthy(svc, c["healthCheck"]):
                    # A dependency that never turns healthy: ECS never starts the task's container.
                    return ["sh", "-c", f"echo 'service {c['name']} did not turn healthy' >&2; exit 1"]
        stats["ready_seconds"].append(round(time.time() - t0, 3))
        stats["images"][image] = stats["images"].get(image, 0) + 1
        argv = ["docker", "create", "--name", name] + network + binary + mounts(main)
        if main.get("entryPoint"):
            argv += ["--entrypoint", main["entryPoint"][0]]
        overrides = t["overrides"]
        if overrides.get("cpu"):
            argv += ["--cpus", str(int(overrides["cpu"]) / 1024)]
        if overrides.get("memory"):
            argv += ["--memory", f"{overrides['memory']}m"]
        if main.get("user"):
            argv += ["--user", main["user"]]
        for kv in main.get("environment", []) + ov.get("environment", []):
            argv += ["-e", f"{kv['name']}={kv['value']}"]
        argv += [image] + (ov.get("command") or main.get("command", []))
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        if public(t) and not services:
            subprocess.run(["docker", "network", "connect", internet, name], stdout=subprocess.DEVNULL, check=True)
        return ["docker", "start", "-a", name]
    ghosts = []  # the second copies of --duplicate: same job, same attempt, nobody waits for them

    def container(arn):
        # Named after the cluster too: tests running at once each find only their own.
        return "agenteval-task-" + (f"{a.cluster}-" if a.cluster else "") + arn.rsplit("/", 1)[-1]

    def terminate(arn, proc):
        if arn in in_containers:
            subprocess.run(["docker", "stop", "-t", "10", container(arn)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        elif proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    def write_stats():
        if a.stats:
            with open(a.stats + ".tmp", "w") as f:
                json.dump(stats, f)
            os.replace(a.stats + ".tmp", a.stats)

    definitions = {}

    def main_container(t):
        """The command and environment a task's main container runs with: its task definition's
        (the first essential container not a sidecar), with the RunTask's overrides on top. A
        launch made as EventBridge Scheduler makes it carries no overrides at all."""
        arn = t["taskDefinitionArn"]
        if arn not in definitions:
            definitions[arn] = ecs.describe_task_definition(taskDefinition=arn)["taskDefinition"]
        containers = definitions[arn].get("containerDefinitions", [])
        main = next((c for c in containers if c.get("essential", True) and "otel" not in c["name"]
                     and "adot" not in c.get("image", "")), containers[0] if containers else {})
        overrides = t.get("overrides", {}).get("containerOverrides", [])
        ov = next((o for o in overrides if o.get("name") == main.get("name")), overrides[0] if overrides else {})
        env = {kv["name"]: kv["value"] for kv in main.get("environment", [])}
        env.update({kv["name"]: kv["value"] for kv in ov.get("environment", [])})
        return {"command": ov.get("command") or main.get("command", []),
                "environment": [{"name": k, "value": v} for k, v in env.items()]}

    # The first counts say it is ready: tasks launched from now on stay RUNNING until stopped.
    write_stats()
    while not stop:
        tasks = []
        clusters = [a.cluster] if a.cluster else ecs.list_clusters()["clusterArns"]
        for cluster in clusters:
            arns = []
            for page in ecs.get_paginator("list_tasks").paginate(cluster=cluster):
                arns.extend(page["taskArns"])
            for i in range(0, len(arns), 100):
                if arns[i : i + 100]:
                    for t in ecs.describe_tasks(cluster=cluster, tasks=arns[i : i + 100])["tasks"]:
                        tasks.append((cluster, t))
        for cluster, t in tasks:
            arn = t["taskArn"]
            if arn not in seen and t["lastStatus"] == "RUNNING" and t.get("desiredStatus") == "RUNNING":
                seen.add(arn)
                if stats["dropped"] < a.drop_first:
                    stats["dropped"] += 1
                    ecs.stop_task(cluster=cluster, task=arn, reason="Host EC2 instance terminated (simulated)")
                    continue
                ov = main_container(t)
                env = dict(platform_env)
                env["ECS_CONTAINER_METADATA_URI_V4"] = f"http://127.0.0.1:{metadata_port}/v4/{arn.rsplit('/', 1)[-1]}"
                env.update({kv["name"]: kv["value"] for kv in ov.get("environment", [])})
                out = subprocess.DEVNULL
                if a.logs:
                    os.makedirs(a.logs, exist_ok=True)
                    out = open(os.path.join(a.logs, arn.rsplit("/", 1)[-1] + ".log"), "wb")
                environment = env_argv(arn, t)
                if environment:
                    argv = environment
                    in_containers.add(arn)
                elif a.image:
                    in_containers.add(arn)
                    argv = ["docker", "run", "--rm", "--name", container(arn), "--network", "host"]
                    for k, v in env.items():
                        if k not in ("PATH", "HOME"):
                            argv += ["-e", f"{k}={v}"]
                    argv += [a.image] + ov["command"]
                else:
                    argv = [a.agenteval] + ov["command"]
                proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=subprocess.STDOUT if a.logs else subprocess.DEVNULL,
                                        start_new_session=True)
                if a.logs:
                    out.close()
                running[arn] = (proc, None)
                if a.duplicate and arn not in in_containers:
                    ghosts.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL, start_new_session=True))
                    stats["duplicates"] += 1
                cluster_of[arn] = cluster
                started_at[arn] = time.time()
                stats["started"] += 1
            elif arn in running and t.get("desiredStatus") == "STOPPED" and running[arn][1] is None:
                # The controller stopped the task: ECS sends SIGTERM, then SIGKILL after 30 s.
                proc, _ = running[arn]
                terminate(arn, proc)
                running[arn] = (proc, time.time())
                stats["stopped_by_controller"] += 1
        if a.interrupt_first_after is not None and not interrupted:
            first = min(started_at, key=started_at.get, default=None)
            if first in running and time.time() - started_at[first] >= a.interrupt_first_after:
                # A Spot interruption: SIGTERM to the container, then the task stops for good.
                interrupted.add(first)
                stats["interrupted"] += 1
                proc, _ = running[first]
                terminate(first, proc)
                proc.wait()
                del running[first]
                stats["exits"][str(proc.returncode)] = stats["exits"].get(str(proc.returncode), 0) + 1
                ecs.stop_task(cluster=cluster_of[first], task=first, reason="Your Spot Task was interrupted.")
        for arn, (proc, stop_at) in list(running.items()):
            rc = proc.poll()
            if rc is None:
                if stop_at is not None and time.time() - stop_at > 5 and arn not in in_containers:
                    os.killpg(proc.pid, signal.SIGKILL)
                continue
            del running[arn]
            if arn in in_containers:
                quiet(["docker", "rm", "-f", container(arn)] + extras.pop(arn, []))
            for v in volumes.pop(arn, []):
                quiet(["docker", "volume", "rm", "-f", v])
            stats["exits"][str(rc)] = stats["exits"].get(str(rc), 0) + 1
            if stop_at is None:
                ecs.stop_task(cluster=cluster_of[arn], task=arn, reason=f"Essential container in task exited (exit code {rc})")
        write_stats()
        time.sleep(0.2)
    for g in ghosts:
        if g.poll() is None:
            os.killpg(g.pid, signal.SIGKILL)
    for arn, (proc, _) in running.items():
        if arn in in_containers:
            quiet(["docker", "rm", "-f", container(arn)] + extras.pop(arn, []))
        elif proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for vols in volumes.values():
        for v in vols:
            quiet(["docker", "volume", "rm", "-f", v])
    return 0


if __name__ == "__main__":
    sys.exit(main())
