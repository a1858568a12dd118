#!/usr/bin/env python3
"""Searches every S3 object of a bucket (each file of a task's pack, `*.tar.gz`, unpacked) and
every item of a DynamoDB table in the emulator for a string (test code: proves a secret never
reached them). Exit 1 when found."""
import argparse
import io
import json
import sys
import tarfile

import boto3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--needle", required=True)
    a = p.parse_args()
    kw = dict(endpoint_url=a.endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    s3 = boto3.client("s3", **kw)
    found, objects, items = [], 0, 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=a.bucket):
        for o in page.get("Contents", []):
            objects += 1
            body = s3.get_object(Bucket=a.bucket, Key=o["Key"])["Body"].read()
            if a.needle.encode() in body:
                found.append("s3://%s/%s" % (a.bucket, o["Key"]))
            if o["Key"].endswith(".tar.gz"):
                with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as pack:
                    for m in pack.getmembers():
                        f = pack.extractfile(m) if m.isfile() else None
                        if f is not None and a.needle.encode() in f.read():
                            found.append("s3://%s/%s:%s" % (a.bucket, o["Key"], m.name))
    ddb = boto3.client("dynamodb", **kw)
    for page in ddb.get_paginator("scan").paginate(TableName=a.table):
        for it in page["Items"]:
            items += 1
            if a.needle in json.dumps(it):
                found.append("dynamodb item %s/%s" % (it["pk"]["S"], it["sk"]["S"]))
    print(json.dumps({"objects": objects, "items": items, "found": found}))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
