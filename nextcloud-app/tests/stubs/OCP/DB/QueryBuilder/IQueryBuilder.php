<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\DB\QueryBuilder;

use OCP\DB\IResult;
use OCP\IDBConnection;

interface IQueryBuilder {
	/** Values of Doctrine DBAL 3 ParameterType, which the real constants alias. */
	public const PARAM_NULL = 0;
	public const PARAM_INT = 1;
	public const PARAM_STR = 2;
	public const PARAM_LOB = 3;

	public function expr();

	public function func();

	public function executeQuery(?IDBConnection $connection = null): IResult;

	public function executeStatement(?IDBConnection $connection = null): int;

	public function getSQL();

	public function setMaxResults($maxResults);

	public function select(...$selects);

	public function delete($delete = null, $alias = null);

	public function update($update = null, $alias = null);

	public function insert($insert = null);

	public function from($from, $alias = null);

	public function set($key, $value);

	public function where(...$predicates);

	public function values(array $values);

	public function orderBy($sort, $order = null);

	public function createNamedParameter($value, $type = self::PARAM_STR, $placeHolder = null);

	public function getLastInsertId(): int;
}
