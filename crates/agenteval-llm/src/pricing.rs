//! The packaged, dated price table (`prices.json`) and cost arithmetic. A model the table does
//! not know has an unknown cost — reported as such, never as 0.

use std::collections::BTreeMap;

pub use agenteval_core::config::ModelPrice as Price;
use serde::Deserialize;

use crate::types::Usage;

const PACKAGED: &str = include_str!("prices.json");

/// The date of the packaged prices.
pub const PRICES_DATE: &str = "2025-06-01";

/// Prices by model id, with aliases (`claude-3-5-haiku-latest`) and dated ids
/// (`gpt-4o-mini-2024-07-18`, `claude-3-5-haiku-20241022`) matched to their family.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PriceTable {
    #[serde(default)]
    pub date: Option<String>,
    #[serde(default)]
    models: BTreeMap<String, Price>,
    #[serde(default)]
    aliases: BTreeMap<String, String>,
}

impl PriceTable {
    pub fn packaged() -> PriceTable {
        serde_json::from_str(PACKAGED).expect("the packaged price table parses")
    }

    /// Parses a prices file (the packaged format; `aliases` optional).
    pub fn parse(text: &str) -> Result<PriceTable, crate::LlmError> {
        serde_json::from_str(text).map_err(|e| crate::LlmError::Config(format!("not a prices table: {e}")))
    }

    /// Adds or replaces prices.
    pub fn extend(&mut self, models: impl IntoIterator<Item = (String, Price)>) {
        self.models.extend(models);
    }

    /// The models the table prices by name.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    /// The price of `model`: itself, its alias, or its family once a date suffix or `-latest`
    /// is removed.
    pub fn lookup(&self, model: &str) -> Option<Price> {
        let direct = |m: &str| self.models.get(m).or_else(|| self.aliases.get(m).and_then(|a| self.models.get(a)));
        if let Some(p) = direct(model) {
            return Some(*p);
        }
        let family = strip_version(model);
        (family != model).then(|| direct(family)).flatten().copied()
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

/// Dollars for `usage` at `price`.
pub fn cost(price: &Price, usage: &Usage) -> f64 {
    let cached = usage.cached_input_tokens.min(usage.input_tokens);
    let fresh = usage.input_tokens - cached;
    let cached_rate = price.cached_input_per_mtok.unwrap_or(price.input_per_mtok);
    (fresh as f64 * price.input_per_mtok
        + cached as f64 * cached_rate
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
    fn cost_is_tokens_times_price_with_cached_input_cheaper() {
        let p = Price { input_per_mtok: 1.0, output_per_mtok: 4.0, cached_input_per_mtok: Some(0.5) };
        let u = Usage { input_tokens: 1_000_000, output_tokens: 500_000, cached_input_tokens: 400_000 };
        assert!((cost(&p, &u) - (0.6 + 0.2 + 2.0)).abs() < 1e-12);
        let mut t = PriceTable::packaged();
        t.extend([("my-finetune".to_string(), p)]);
        assert_eq!(t.lookup("my-finetune"), Some(p));
    }
}
