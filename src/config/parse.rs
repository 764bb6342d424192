//! The `key:value,key:[k:v,k:v]` grammar of `PYTORCH_CUDA_ALLOC_CONF`, driven by [`OPTIONS`].

use super::options::{OPTIONS, RawValue};
use super::{Config, ConfigError};

/// Splits `text` at top-level commas (commas inside `[...]` belong to a list value).
fn split_top_level(text: &str) -> Result<Vec<&str>, ConfigError> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0usize;
    for (i, ch) in text.char_indices() {
        match ch {
            '[' => {
                depth += 1;
                if depth > 1 {
                    return Err(syntax(&text[start..], "nested `[` is not allowed"));
                }
            }
            ']' => {
                if depth == 0 {
                    return Err(syntax(&text[start..], "`]` without a matching `[`"));
                }
                depth -= 1;
            }
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(syntax(&text[start..], "`[` is never closed"));
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn syntax(near: &str, reason: &str) -> ConfigError {
    ConfigError::Syntax {
        near: near.trim().to_string(),
        reason: reason.to_string(),
    }
}

fn parse_value(entry: &str, text: &str) -> Result<RawValue, ConfigError> {
    let text = text.trim();
    if let Some(inner) = text.strip_prefix('[') {
        let Some(inner) = inner.strip_suffix(']') else {
            return Err(syntax(entry, "text after the closing `]`"));
        };
        let mut items = Vec::new();
        for item in inner.split(',') {
            let Some((k, v)) = item.split_once(':') else {
                return Err(syntax(item, "a list entry needs the form `key:value`"));
            };
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() || v.is_empty() || v.contains(':') {
                return Err(syntax(item, "a list entry needs the form `key:value`"));
            }
            items.push((k.to_string(), v.to_string()));
        }
        Ok(RawValue::List(items))
    } else if text.is_empty() {
        Err(syntax(entry, "the value is empty"))
    } else if text.contains(':') || text.contains(']') {
        Err(syntax(entry, "a value may hold `:` only inside `[...]`"))
    } else {
        Ok(RawValue::Scalar(text.to_string()))
    }
}

pub(super) fn parse(text: &str) -> Result<Config, ConfigError> {
    let mut config = Config::default();
    let mut seen: Vec<&'static str> = Vec::new();
    for entry in split_top_level(text)? {
        if entry.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = entry.split_once(':') else {
            return Err(syntax(entry, "missing `:` between key and value"));
        };
        let key = key.trim();
        let Some(option) = OPTIONS.iter().find(|o| o.key == key) else {
            return Err(ConfigError::UnknownKey {
                key: key.to_string(),
                valid: OPTIONS.iter().map(|o| o.key).collect(),
            });
        };
        if seen.contains(&option.key) {
            return Err(ConfigError::DuplicateKey { key: option.key });
        }
        seen.push(option.key);
        let value = parse_value(entry, value)?;
        (option.apply)(&mut config, &value).map_err(|reason| ConfigError::InvalidValue {
            key: option.key,
            value: value.as_written(),
            reason,
            allowed: option.allowed,
        })?;
    }
    config.validate()?;
    Ok(config)
}
