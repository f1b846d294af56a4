/**
 * Thrown when a flow definition breaks a rule that SQL would also enforce (slug syntax, option
 * ranges, dependencies). Raising it while the flow is built means a worker never ships a
 * definition that the database would refuse at startup.
 *
 * @example
 * ```ts
 * import { Flow, FlowDefinitionError } from "@pgflow/shared";
 *
 * try {
 *   new Flow<{ id: string }>({ slug: "my-flow" });
 * } catch (error) {
 *   console.log(error instanceof FlowDefinitionError); // true
 * }
 * ```
 */
export class FlowDefinitionError extends Error {
  /** Creates the error with a message that names the offending value and the fix. */
  constructor(message: string) {
    super(message);
    this.name = "FlowDefinitionError";
  }
}
