"""Where cards go: Slack's Web API, or a terminal. Flows never name a Slack method."""
