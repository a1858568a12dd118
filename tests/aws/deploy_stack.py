#!/usr/bin/env python3
"""Deploys infra/agenteval.yaml into an AWS emulator (moto) and prints the stack's outputs as
JSON, or deletes the stack (test code). moto's CloudFormation creates the bucket, table,
cluster, task definitions, roles and log group, and silently skips what it does not model
(the Scheduler schedule); see docs/operations.md for what the emulator cannot hold.

  deploy_stack.py --endpoint URL --stack NAME --template FILE --param Key=Value ...
  deploy_stack.py --endpoint URL --stack NAME --delete

Without Subnets/SecurityGroups/VpcId parameters it uses the emulator's default VPC (its first
subnet and a security group it makes); with --set-flags it prints only the stack's `SetFlags` output
(docker/compose.yaml uses it so, for a laptop).
"""
import argparse
import json

import boto3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--stack", required=True)
    p.add_argument("--template")
    p.add_argument("--param", action="append", default=[], help="Key=Value")
    p.add_argument("--delete", action="store_true")
    p.add_argument("--set-flags", action="store_true", help="print only the SetFlags output")
    a = p.parse_args()
    kw = dict(endpoint_url=a.endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    cfn = boto3.client("cloudformation", **kw)
    if a.delete:
        cfn.delete_stack(StackName=a.stack)
        status = "DELETED"
        try:
            status = cfn.describe_stacks(StackName=a.stack)["Stacks"][0]["StackStatus"]
        except cfn.exceptions.ClientError:
            pass
        print(json.dumps({"status": status}))
        return
    given = dict(kv.split("=", 1) for kv in a.param)
    if "Subnets" not in given or "SecurityGroups" not in given or "VpcId" not in given:
        ec2 = boto3.client("ec2", **kw)
        subnet = ec2.describe_subnets()["Subnets"][0]
        given.setdefault("Subnets", subnet["SubnetId"])
        given.setdefault("VpcId", subnet["VpcId"])
        if "SecurityGroups" not in given:
            sg = ec2.create_security_group(GroupName=f"{a.stack}-tasks", Description="agenteval tasks", VpcId=subnet["VpcId"])
            given["SecurityGroups"] = sg["GroupId"]
    given.setdefault("ImageUri", "agenteval:dev")
    params = [{"ParameterKey": k, "ParameterValue": v} for k, v in given.items()]
    with open(a.template) as f:
        body = f.read()
    cfn.create_stack(StackName=a.stack, TemplateBody=body, Parameters=params, Capabilities=["CAPABILITY_IAM"])
    stack = cfn.describe_stacks(StackName=a.stack)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    # What the emulator skipped comes back without a logical id.
    summaries = cfn.list_stack_resources(StackName=a.stack)["StackResourceSummaries"]
    resources = {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in summaries if r.get("LogicalResourceId")}
    if a.set_flags:
        print(outputs["SetFlags"])
    else:
        print(json.dumps({"status": stack["StackStatus"], "outputs": outputs, "resources": resources}))


if __name__ == "__main__":
    main()
