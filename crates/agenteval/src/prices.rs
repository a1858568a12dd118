//! `agenteval prices`: the packaged price table, where each price came from, and with
//! `--config` the prices that config adds and which of its models have none.

use agenteval_llm::{PRICES_DATE, Price, PriceTable};
use serde_json::json;

use crate::session::config_failure;
use crate::{Failure, exit};

fn money(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v}"))
}

// Long: the table, the sources and the config's part are one listing, in text and in JSON.
pub fn list(config: Option<&std::path::Path>, json: bool) -> Result<u8, Failure> {
    let mut table = PriceTable::packaged();
    // Loaded without the price check: which of its models have no price is what this shows.
    let loaded = config.map(|c| agenteval_core::config::load_config(c, &[])).transpose().map_err(config_failure)?;
    let (named, flat) =
        loaded.as_ref().map(|l| agenteval_engine::agents::access::config_prices(&l.config)).unwrap_or_default();
    table.extend(named);
    // The models the config calls, and whether each has a price.
    let used: Vec<(String, Option<Price>)> = loaded
        .as_ref()
        .map(|l| {
            let agent = &l.config.agent;
            let models = agent.model().map(str::to_string).into_iter();
            let others = agent.upstream().into_iter().flat_map(|u| u.models.iter().cloned());
            let flat_price = flat.first().map(|f| f.1);
            let bedrock = agenteval_engine::agents::access::bedrock_of(&l.config);
            models
                .chain(others)
                .map(|m| {
                    let name = agenteval_llm::ModelSpec::parse(&m).map_or(m.clone(), |s| s.name);
                    let id = bedrock.map(|b| b.model_id(&name).to_string());
                    let price = table.lookup(&name).or_else(|| id.and_then(|id| table.lookup(&id))).or(flat_price);
                    (name, price)
                })
                .collect()
        })
        .unwrap_or_default();
    let rows: Vec<(&str, Price, Option<&str>)> = table.entries().collect();
    if json {
        let models: Vec<serde_json::Value> =
            rows.iter().map(|(m, p, s)| json!({"model": m, "price": p, "source": s.unwrap_or("config")})).collect();
        let flat: Vec<serde_json::Value> = flat.iter().map(|(at, p)| json!({"field": at, "price": p})).collect();
        let used: Vec<serde_json::Value> =
            used.iter().map(|(m, p)| json!({"model": m, "price": p, "priced": p.is_some()})).collect();
        say!(
            "{}",
            json!({"date": PRICES_DATE, "sources": table.sources, "models": models, "endpoint_prices": flat, "config_models": used})
        );
        return Ok(exit::OK);
    }
    let mut t = crate::output::table();
    t.set_header(["model", "input", "cached input", "cache write", "output", "source"]);
    for (m, p, s) in &rows {
        t.add_row([
            m.to_string(),
            format!("{}", p.input_per_mtok),
            money(p.cached_input_per_mtok),
            money(p.cache_write_per_mtok),
            format!("{}", p.output_per_mtok),
            s.unwrap_or("config").to_string(),
        ]);
    }
    say!("{}", crate::output::compact(t));
    say!("USD per million tokens, as of {PRICES_DATE}. Sources:");
    for (key, s) in &table.sources {
        say!("  {key:<10} {} (read {})", s.url, s.read);
    }
    for (at, p) in &flat {
        say!("  {at} prices every model of its endpoint: {} in, {} out", p.input_per_mtok, p.output_per_mtok);
    }
    for (m, p) in &used {
        match p {
            Some(_) => say!("this config's `{m}` is priced"),
            None => say!(
                "this config's `{m}` has no price: its cost is unknown; give one in `agent.upstream.prices.{m}` \
                 (an llm agent: `agent.prices.{m}`)"
            ),
        }
    }
    Ok(exit::OK)
}
