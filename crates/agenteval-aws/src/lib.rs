//! The AWS backends of agenteval: ECS Fargate jobs (`EcsBackend`), S3 bundles
//! (`S3BundleStore`), the DynamoDB run index (`DynamoDbRunIndex`) and Secrets Manager.
//!
//! This is the only crate that imports `aws-sdk-*`. The SDK configuration is built in one
//! place ([`sdk::AwsClients::connect`]) and every SDK error goes through one classifier
//! ([`sdk::classify`]) that decides what is worth retrying.

pub mod bedrock;
pub mod doctor;
pub mod dynamo_index;
pub mod ecs;
pub mod env_tasks;
pub mod kind;
pub mod registry;
pub mod s3_store;
pub mod sdk;
pub mod secrets;
pub mod stack;
pub mod task_images;

pub use bedrock::BedrockHost;
pub use dynamo_index::DynamoDbRunIndex;
pub use ecs::{EcsBackend, EcsSettings, TokenBucket};
pub use kind::EcsBackendKind;
pub use registry::ImageRepository;
pub use s3_store::S3BundleStore;
pub use sdk::{AwsClients, AwsSettings, ClientCache};
pub use secrets::SecretsManager;
