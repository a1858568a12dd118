//! The packaged, dated price table (`prices.json`) and cost arithmetic. A model the table does
//! not know has an unknown cost — reported as such, never as 0.

use std::collections::BTreeMap;

pub use agenteval_core::config::ModelPrice as Price;
use serde::Deserialize;

use crate::types::Usage;

const PACKAGED: &str = include_str!("prices.json");

/// The date of the packaged prices.
pub const PRICES_DATE: &str = "2026-11-05";

/// Prices by model id, with aliases (`claude-3-5-haiku-latest`), dated ids
/// (`gpt-4o-mini-2024-07-18`, `claude-3-5-haiku-20241022`) and Bedrock's ids
/// (`us.anthropic.claude-sonnet-4-5-20250929-v1:0`) matched to their family.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PriceTable {
    #[serde(default)]
    pub date: Option<String>,
    /// Where the prices came from, by provider: the page and the day it was read.
    #[serde(default)]
    pub sources: BTreeMap<String, Source>,
    #[serde(default)]
    models: BTreeMap<String, Entry>,
    #[serde(default)]
    aliases: BTreeMap<String, String>,
}

/// A provider's price page, as read.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Source {
    pub url: String,
    /// The day the page was read.
    pub read: String,
}

/// One model's price and which source it came from.
#[derive(Debug, Clone, Deserialize)]
struct Entry {
    #[serde(flatten)]
    price: Price,
    /// A key of `sources`; none for a price added by a config.
    #[serde(default)]
    source: Option<String>,
}

impl PriceTable {
    pub fn packaged() -> PriceTable {
        serde_json::from_str(PACKAGED).expect("the packaged price table parses")
    }

    /// Parses a prices file (the packaged format; `aliases` and `sources` optional).
    pub fn parse(text: &str) -> Result<PriceTable, crate::LlmError> {
        serde_json::from_str(text).map_err(|e| crate::LlmError::Config(format!("not a prices table: {e}")))
    }

    /// Adds or replaces prices.
    pub fn extend(&mut self, models: impl IntoIterator<Item = (String, Price)>) {
        self.models.extend(models.into_iter().map(|(m, price)| (m, Entry { price, source: None })));
    }

    /// The models the table prices by name.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    /// Every model the table prices, with its price and the key of its source (`None`: added by
    /// a config).
    pub fn entries(&self) -> impl Iterator<Item = (&str, Price, Option<&str>)> {
        self.models.iter().map(|(m, e)| (m.as_str(), e.price, e.source.as_deref()))
    }

    /// The price of `model`: itself, its alias, or its family once a Bedrock region and
    /// provider prefix, a version suffix, a date suffix or `-latest` is removed.
    pub fn lookup(&self, model: &str) -> Option<Price> {
        let direct = |m: &str| {
            self.models.get(m).or_else(|| self.aliases.get(m).and_then(|a| self.models.get(a))).map(|e| e.price)
        };
        let plain = bedrock_base(model);
        direct(model).or_else(|| direct(plain)).or_else(|| {
            let family = strip_version(plain);
            (family != plain).then(|| direct(family)).flatten()
        })
    }
}

/// Bedrock's id of a model → the provider's: `us.anthropic.claude-sonnet-4-5-20250929-v1:0` →
/// `claude-sonnet-4-5-20250929` (a cross-region profile's prefix, the provider's name, the
/// `-vN:M` version).
fn bedrock_base(model: &str) -> &str {
    let mut m = model;
    for region in ["global.", "us.", "eu.", "apac.", "au.", "jp.", "us-gov.", "ca."] {
        if let Some(rest) = m.strip_prefix(region) {
            m = rest;
            break;
        }
    }
    let Some(rest) = m.strip_prefix("anthropic.") else { return model };
    match rest.rfind("-v") {
        Some(at) if rest[at + 2..].split(':').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) => {
            &rest[..at]
        }
        _ => rest,
    }
}

/// `gpt-4o-mini-2024-07-18` → `gpt-4o-mini`; `claude-3-5-haiku-20241022` → `claude-3-5-haiku`;
/// `x-latest` → `x`.
fn strip_version(model: &str) -> &str {
    if let Some(base) = model.strip_suffix("-latest") {
        return base;
    }
    let b = model.as_bytes();
    let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    // -YYYY-MM-DD
    if b.len() > 11 && b[b.len() - 11] == b'-' && b[b.len() - 6] == b'-' && b[b.len() - 3] == b'-' {
        let tail = &b[b.len() - 10..];
        if digits(&tail[..4]) && digits(&tail[5..7]) && digits(&tail[8..]) {
            return &model[..model.len() - 11];
        }
    }
    // -YYYYMMDD
    if b.len() > 9 && b[b.len() - 9] == b'-' && digits(&b[b.len() - 8..]) {
        return &model[..model.len() - 9];
    }
    model
}

/// Dollars for `usage` at `price`: cache reads and writes at their own prices where the table
/// has them (else as input).
pub fn cost(price: &Price, usage: &Usage) -> f64 {
    let cached = usage.cached_input_tokens.min(usage.input_tokens);
    let written = usage.cache_write_tokens.min(usage.input_tokens - cached);
    let fresh = usage.input_tokens - cached - written;
    let cached_rate = price.cached_input_per_mtok.unwrap_or(price.input_per_mtok);
    let write_rate = price.cache_write_per_mtok.unwrap_or(price.input_per_mtok);
    (fresh as f64 * price.input_per_mtok
        + cached as f64 * cached_rate
        + written as f64 * write_rate
        + usage.output_tokens as f64 * price.output_per_mtok)
        / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packaged_table_is_dated_and_matches_families() {
        let t = PriceTable::packaged();
        assert_eq!(t.date.as_deref(), Some(PRICES_DATE));
        let mini = t.lookup("gpt-4o-mini").unwrap();
        assert_eq!(t.lookup("gpt-4o-mini-2024-07-18"), Some(mini));
        assert_eq!(t.lookup("claude-3-5-haiku-20241022"), t.lookup("claude-3-5-haiku-latest"));
        assert!(t.lookup("claude-3-5-haiku").is_some());
        assert_eq!(t.lookup("my-finetune"), None);
        assert_eq!(t.lookup("gpt-4o-2024-08-06").unwrap().input_per_mtok, 2.5);
    }

    #[test]
    fn todays_models_and_their_bedrock_ids_are_priced_from_a_named_source() {
        let t = PriceTable::packaged();
        // The models the docs' own examples use.
        for m in [
            "gpt-5-codex",
            "gpt-5",
            "gpt-5-mini",
            "claude-sonnet-4-5",
            "claude-sonnet-4-5-20250929",
            "claude-haiku-4-5",
        ] {
            assert!(t.lookup(m).is_some(), "{m} has no price");
        }
        let sonnet = t.lookup("claude-sonnet-4-5").unwrap();
        assert_eq!((sonnet.input_per_mtok, sonnet.cache_write_per_mtok), (3.0, Some(3.75)));
        for bedrock in [
            "anthropic.claude-sonnet-4-5-20250929-v1:0",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
        ] {
            assert_eq!(t.lookup(bedrock), Some(sonnet), "{bedrock}");
        }
        assert_eq!(t.lookup("us.meta.llama3-70b-instruct-v1:0"), None);
        for (model, _, source) in t.entries() {
            let source = source.unwrap_or_else(|| panic!("{model} names no source"));
            assert!(t.sources.contains_key(source), "{model}: unknown source {source}");
        }
    }

    #[test]
    fn cost_is_tokens_times_price_with_cached_input_cheaper() {
        let p = Price {
            input_per_mtok: 1.0,
            output_per_mtok: 4.0,
            cached_input_per_mtok: Some(0.5),
            cache_write_per_mtok: None,
        };
        let u = Usage {
            input_tokens: 1_000_000,
            output_tokens: 500_000,
            cached_input_tokens: 400_000,
            cache_write_tokens: 0,
        };
        assert!((cost(&p, &u) - (0.6 + 0.2 + 2.0)).abs() < 1e-12);
        // A cache write costs its own price: 100,000 of the fresh 600,000 at 1.25.
        let w = Price { cache_write_per_mtok: Some(1.25), ..p };
        let written = Usage { cache_write_tokens: 100_000, ..u };
        assert!((cost(&w, &written) - (0.5 + 0.2 + 0.125 + 2.0)).abs() < 1e-12);
        let mut t = PriceTable::packaged();
        t.extend([("my-finetune".to_string(), p)]);
        assert_eq!(t.lookup("my-finetune"), Some(p));
    }
}
