// Owns: the colour theme. Loaded as a classic script in <head> (before the first paint, so a
// dark page never flashes light); app.js wires the header's toggle to cycle() / label().
// "auto" follows prefers-color-scheme; "light"/"dark" set <html data-theme> (app.css) and are
// remembered in this origin's localStorage.
(function () {
  const KEY = "penguin.theme";
  const MODES = ["auto", "dark", "light"];
  function read() {
    try {
      const mode = localStorage.getItem(KEY);
      return MODES.includes(mode) ? mode : "auto";
    } catch (_) {
      return "auto";
    }
  }
  function apply(mode) {
    if (mode === "auto") delete document.documentElement.dataset.theme;
    else document.documentElement.dataset.theme = mode;
  }
  function set(mode) {
    try {
      if (mode === "auto") localStorage.removeItem(KEY); else localStorage.setItem(KEY, mode);
    } catch (_) { /* storage off: the choice lasts for this page only */ }
    apply(mode);
    return mode;
  }
  apply(read());
  window.penguinTheme = {
    get: read,
    set,
    cycle() { return set(MODES[(MODES.indexOf(read()) + 1) % MODES.length]); },
  };
})();
