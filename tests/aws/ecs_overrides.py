#!/usr/bin/env python3
"""Prints the container-override environment of every ECS task of a cluster, as JSON (test code).

[{"task": arn, "started_by": ..., "env": {name: value}}]
"""
import argparse
import json

import boto3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--cluster", required=True)
    a = p.parse_args()
    ecs = boto3.client("ecs", endpoint_url=a.endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    arns = []
    for status in ("RUNNING", "STOPPED"):
        for page in ecs.get_paginator("list_tasks").paginate(cluster=a.cluster, desiredStatus=status):
            arns.extend(page["taskArns"])
    out = []
    for i in range(0, len(arns), 100):
        for t in ecs.describe_tasks(cluster=a.cluster, tasks=arns[i:i + 100])["tasks"]:
            env = {}
            for c in t.get("overrides", {}).get("containerOverrides", []):
                env.update({kv["name"]: kv["value"] for kv in c.get("environment", [])})
            out.append({"task": t["taskArn"], "started_by": t.get("startedBy"), "env": env})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
