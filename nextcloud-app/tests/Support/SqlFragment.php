<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\DB\QueryBuilder\IParameter;
use OCP\DB\QueryBuilder\IQueryFunction;

/** A piece of SQL: a named parameter placeholder or a function call. */
final class SqlFragment implements IParameter, IQueryFunction {
	public function __construct(
		private readonly string $sql,
	) {
	}

	public function __toString(): string {
		return $this->sql;
	}
}
