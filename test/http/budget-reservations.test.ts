/** Reserved token budgets on SQLite (the suite says what is checked). */
import { budgetReservationSuite } from './budget-reservations.suite.js';

budgetReservationSuite('sqlite');
