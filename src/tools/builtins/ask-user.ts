/**
 * Built-in `ask_user`: stops a task in `waiting` with a question; the answer
 * arrives as this call's result through POST /tasks/:id/resume. In a chat the
 * question simply becomes the reply.
 */
import { waitForUser, type Tool } from '../tool.js';

export function askUserTool(): Tool {
  return {
    name: 'ask_user',
    description:
      'Ask the user a question and wait for the answer. Use it when you cannot continue without information or a decision only the user has.',
    parameters: {
      type: 'object',
      properties: {
        question: {
          type: 'string',
          minLength: 1,
          description: 'The question, complete and self-contained.',
        },
      },
      required: ['question'],
      additionalProperties: false,
    },
    async run(args) {
      return waitForUser(String(args.question));
    },
  };
}
