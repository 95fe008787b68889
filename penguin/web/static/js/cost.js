// Owns: showing tokens and an estimated cost (US dollars, from the server's price table: the
// built-in one under config.toml's [prices]) the same way on every page. A model without a
// price shows its tokens only, never a made-up $0.
import { fmtNum, h } from "./dom.js";

/** "$0.0123", "$4.20"; null for no price. */
export function fmtCost(cost) {
  if (cost === null || cost === undefined) return null;
  if (cost === 0) return "$0";
  if (cost < 0.0001) return "<$0.0001";
  return `$${cost < 1 ? cost.toFixed(4) : cost.toFixed(2)}`;
}

/** A cell's content: the cost, or "tokens only" when no model of the row has a price, with
 * the unpriced tokens named when only some have. */
export function costNode(cost, unpriced) {
  const shown = fmtCost(cost);
  if (shown === null) {
    return h("span", { class: "muted cost none", title: "no price for this model in the price table: tokens only" }, "—");
  }
  if (unpriced) {
    return h("span", { class: "cost", title: `${fmtNum(unpriced)} tokens of models without a price are not counted` },
      shown, h("span", { class: "muted small" }, ` + ${fmtNum(unpriced)} unpriced tokens`));
  }
  return h("span", { class: "cost" }, shown);
}

/** "1,234 tokens" or "1.2k" style short counts for dense places. */
export function shortTokens(n) {
  const v = Number(n || 0);
  if (v < 1000) return String(v);
  if (v < 1e6) return `${(v / 1000).toFixed(v < 10000 ? 1 : 0)}k`;
  return `${(v / 1e6).toFixed(v < 1e7 ? 2 : 1)}M`;
}
