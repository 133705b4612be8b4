//! Topic name rules, as RocketMQ's `TopicValidator`: the characters `%|a-zA-Z0-9_-`,
//! at most 127 characters, or 255 for `%RETRY%` and `%DLQ%` topics. Names become
//! directory names under `consumequeue/`, so these rules also keep paths safe.

pub const TOPIC_MAX_LEN: usize = 127;
pub const SYSTEM_TOPIC_MAX_LEN: usize = 255;

/// Checks a topic name; the error says what is wrong with it.
pub fn validate_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() {
        return Err("topic is empty".into());
    }
    if let Some(bad) = topic
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-')))
    {
        return Err(format!(
            "topic '{topic}' has the character {bad:?}; allowed are %|a-zA-Z0-9_-"
        ));
    }
    let limit = if topic.starts_with("%RETRY%") || topic.starts_with("%DLQ%") {
        SYSTEM_TOPIC_MAX_LEN
    } else {
        TOPIC_MAX_LEN
    };
    if topic.len() > limit {
        return Err(format!(
            "topic is {} characters; at most {limit} are allowed",
            topic.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_rocketmq_names_and_refuses_the_rest() {
        assert!(validate_topic("TopicTest").is_ok());
        assert!(validate_topic("%RETRY%group_a").is_ok());
        assert!(validate_topic(&format!("%RETRY%{}", "g".repeat(200))).is_ok());
        assert!(validate_topic(&"t".repeat(128))
            .unwrap_err()
            .contains("at most 127"));
        assert!(validate_topic("a/b").unwrap_err().contains("'/'"));
        assert!(validate_topic("..").is_err());
        assert!(validate_topic("").is_err());
    }
}
