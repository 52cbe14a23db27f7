/** Runs once before the suite. Kept for suite-wide setup such as building dist/ for process tests. */
export default function setup(): void {}
