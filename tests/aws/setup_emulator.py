#!/usr/bin/env python3
"""Creates, in an AWS emulator (moto), the resources an agenteval AWS run needs besides the
DynamoDB table (which the tests create with agenteval's own `DynamoDbRunIndex::create_table`):
a bucket, an ECS cluster, a Fargate task definition, the workers' security group, one for each
network mode of the tasks' environments (as infra/agenteval.yaml makes them: `no_network`
reaches only the workers' ports, `public` the internet too), and secrets.
Prints a JSON object with the subnet, security groups and task definition to use."""
import argparse
import json

import boto3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket")
    p.add_argument("--cluster", required=True)
    p.add_argument("--family", default="agenteval-worker")
    p.add_argument("--secret", action="append", default=[], help="NAME=VALUE")
    a = p.parse_args()
    kw = dict(endpoint_url=a.endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    if a.bucket:
        boto3.client("s3", **kw).create_bucket(Bucket=a.bucket)
    ecs = boto3.client("ecs", **kw)
    ecs.create_cluster(clusterName=a.cluster)
    td = ecs.register_task_definition(
        family=a.family,
        networkMode="awsvpc",
        requiresCompatibilities=["FARGATE"],
        cpu="512",
        memory="1024",
        containerDefinitions=[{"name": "agenteval", "image": "agenteval:local", "memory": 1024, "essential": True}],
    )["taskDefinition"]["taskDefinitionArn"]
    ec2 = boto3.client("ec2", **kw)
    subnet = ec2.describe_subnets()["Subnets"][0]
    sg = ec2.create_security_group(GroupName=f"{a.cluster}-sg", Description="agenteval workers", VpcId=subnet["VpcId"])["GroupId"]
    groups = {}
    for mode in ("no_network", "allowlist", "public"):
        g = ec2.create_security_group(GroupName=f"{a.cluster}-env-{mode}", Description=f"agenteval environments ({mode})",
                                      VpcId=subnet["VpcId"])["GroupId"]
        worker_ports = {"IpProtocol": "tcp", "FromPort": 47600, "ToPort": 47699, "UserIdGroupPairs": [{"GroupId": sg}]}
        if mode != "public":
            # A new group may reach anything; a no-network environment reaches the workers only.
            ec2.revoke_security_group_egress(GroupId=g, IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}])
        ec2.authorize_security_group_egress(GroupId=g, IpPermissions=[worker_ports])
        ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=[dict(worker_ports, UserIdGroupPairs=[{"GroupId": g}])])
        groups[mode] = g
    sm = boto3.client("secretsmanager", **kw)
    for s in a.secret:
        name, value = s.split("=", 1)
        sm.create_secret(Name=name, SecretString=value)
    print(json.dumps({"subnet": subnet["SubnetId"], "vpc": subnet["VpcId"], "security_group": sg, "task_definition": td, "environment_groups": groups}))


if __name__ == "__main__":
    main()
