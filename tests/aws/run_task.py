#!/usr/bin/env python3
"""Launches a task as EventBridge Scheduler launches the nightly one (test code): a RunTask of a
task definition on Fargate with its network and no overrides at all. Prints the task's ARN.

  run_task.py --endpoint URL --cluster C --task-definition TD --subnet S --group G
"""
import argparse

import boto3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--cluster", required=True)
    p.add_argument("--task-definition", required=True)
    p.add_argument("--subnet", required=True)
    p.add_argument("--group", required=True)
    a = p.parse_args()
    ecs = boto3.client("ecs", endpoint_url=a.endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    out = ecs.run_task(
        cluster=a.cluster,
        taskDefinition=a.task_definition,
        launchType="FARGATE",
        count=1,
        networkConfiguration={"awsvpcConfiguration": {"subnets": [a.subnet], "securityGroups": [a.group]}},
    )
    if out.get("failures") or not out.get("tasks"):
        raise SystemExit(f"RunTask failed: {out.get('failures')}")
    print(out["tasks"][0]["taskArn"])


if __name__ == "__main__":
    main()
