//! `json_schema`: the final answer (or the value at a pointer in it) is valid against a JSON
//! Schema (draft 2020-12, compiled once); every violation is listed in the reason.

use agenteval_core::Result;
use agenteval_core::traits::EvalInput;

use super::{Judge, Judgement, final_step, verdict};

#[derive(Debug)]
pub(super) struct JsonSchema {
    schema: jsonschema::Validator,
    pointer: Option<String>,
}

impl JsonSchema {
    /// `schema` is the inline schema (or the one the loader read from `schema_file`).
    pub(super) fn build(
        schema: &serde_json::Value,
        pointer: Option<String>,
    ) -> std::result::Result<JsonSchema, String> {
        let schema = jsonschema::draft202012::new(schema).map_err(|e| format!("invalid JSON Schema: {e}"))?;
        Ok(JsonSchema { schema, pointer })
    }
}

/// The answer as JSON: a string that holds JSON is parsed, anything else is taken as is.
fn answer_json(answer: &serde_json::Value) -> serde_json::Value {
    match answer {
        serde_json::Value::String(s) => serde_json::from_str(s.trim()).unwrap_or_else(|_| answer.clone()),
        other => other.clone(),
    }
}

impl Judge for JsonSchema {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let Some(answer) = input.result.final_answer.as_ref() else {
            return Ok(verdict(false, "no final answer".into(), vec![]));
        };
        let doc = answer_json(answer);
        let target = match self.pointer.as_deref().filter(|p| !p.is_empty()) {
            None => &doc,
            Some(p) => match doc.pointer(p) {
                Some(v) => v,
                None => return Ok(verdict(false, format!("the answer has nothing at {p}"), final_step(input))),
            },
        };
        let errors: Vec<String> = self
            .schema
            .iter_errors(target)
            .map(|e| {
                let at = e.instance_path().to_string();
                format!("{}: {e}", if at.is_empty() { "/".to_string() } else { at })
            })
            .collect();
        Ok(if errors.is_empty() {
            verdict(true, "valid against the schema".into(), final_step(input))
        } else {
            verdict(false, format!("{} violations: {}", errors.len(), errors.join("; ")), final_step(input))
        })
    }
}
