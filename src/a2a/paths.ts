/** Where the A2A routes live: shared by the routes and the cards that point at them. */

/** Where a card is, under an agent's A2A URL (and under the server root, for the index). */
export const AGENT_CARD_PATH = '.well-known/agent-card.json';
