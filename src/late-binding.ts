/**
 * A dependency that can only exist after the part that needs it: a tool
 * that runs a subagent needs the runtime, which needs the tools. The part is
 * given this port at construction; the composition root binds the target once,
 * as soon as it exists, and a call before that fails loudly instead of
 * finding `undefined`.
 */
export class LateBinding<T> {
  private target: T | undefined;

  /** `what` names the target in the error a call before `bind` throws. */
  constructor(private readonly what: string) {}

  /** Supplies the target; a second call is a wiring mistake and throws. */
  bind(target: T): void {
    if (this.target !== undefined) throw new Error(`${this.what} is already bound.`);
    this.target = target;
  }

  /** The bound target; throws when it is asked for before `bind`. */
  get(): T {
    if (this.target === undefined) {
      throw new Error(`${this.what} was used before the composition root bound it.`);
    }
    return this.target;
  }
}
