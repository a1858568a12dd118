//! The end-to-end tests, in one test binary (ripgrep's layout): each module drives the real
//! `agenteval` binary as a user, a hostile agent or CI would. One binary links once, and its
//! tests share one AWS emulator (started on first use).

mod util;

mod aws;
mod benchmarks;
mod cli;
mod compat;
mod containment;
mod docs;
mod e2e;
mod environments;
mod export;
mod gateway;
mod harbor_rules;
mod harbor_tasks;
mod hardening;
mod html;
mod humaneval;
mod infra;
mod interchange;
mod judging;
mod library;
mod llm;
mod matrix;
mod presets;
mod protocol;
mod roles;
mod swebench;
mod tamper;
mod telemetry;
mod tidy;
mod trust;
mod ui;
mod workspaces;
