<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\DB\IResult;
use OCP\DB\QueryBuilder\IExpressionBuilder;
use OCP\DB\QueryBuilder\IFunctionBuilder;
use OCP\DB\QueryBuilder\IParameter;
use OCP\DB\QueryBuilder\IQueryBuilder;
use OCP\DB\QueryBuilder\IQueryFunction;
use OCP\IDBConnection;
use PDO;

/**
 * SqliteQueryBuilder implements the part of OCP's IQueryBuilder the app uses, with the
 * behaviour of Nextcloud's QueryBuilder that matters to callers: table names get the
 * prefix, identifiers are quoted, named parameters are typed, executeQuery() only runs
 * SELECTs and executeStatement() refuses them, getLastInsertId() needs a run INSERT.
 */
final class SqliteQueryBuilder implements IQueryBuilder {
	private string $type = '';
	private string $table = '';
	/** @var list<string> */
	private array $selects = [];
	/** @var list<string> */
	private array $where = [];
	/** @var list<string> */
	private array $orderBy = [];
	/** @var array<string, string> column => SQL value */
	private array $values = [];
	private ?int $maxResults = null;
	/** @var array<string, array{0: mixed, 1: int}> */
	private array $params = [];
	private bool $insertRan = false;

	public function __construct(
		private readonly SqliteConnection $connection,
	) {
	}

	public function expr(): IExpressionBuilder {
		return new class implements IExpressionBuilder {
			public function eq($x, $y, $type = null): string {
				return SqliteQueryBuilder::quote($x) . ' = ' . SqliteQueryBuilder::quote($y);
			}
		};
	}

	public function func(): IFunctionBuilder {
		return new class implements IFunctionBuilder {
			public function count($count = '', $alias = ''): IQueryFunction {
				$what = ($count === '' || $count === '*') ? '*' : SqliteQueryBuilder::quote($count);
				return new SqlFragment('COUNT(' . $what . ')' . ($alias === '' ? '' : ' AS ' . SqliteQueryBuilder::quote($alias)));
			}
		};
	}

	public function select(...$selects) {
		$this->type = 'select';
		foreach ($selects as $select) {
			foreach ((is_array($select) ? $select : [$select]) as $column) {
				$this->selects[] = self::quote($column);
			}
		}
		return $this;
	}

	public function from($from, $alias = null) {
		$this->table = (string)$from;
		return $this;
	}

	public function insert($insert = null) {
		$this->type = 'insert';
		$this->table = (string)$insert;
		return $this;
	}

	public function update($update = null, $alias = null) {
		$this->type = 'update';
		$this->table = (string)$update;
		return $this;
	}

	public function delete($delete = null, $alias = null) {
		$this->type = 'delete';
		$this->table = (string)$delete;
		return $this;
	}

	public function values(array $values) {
		foreach ($values as $column => $value) {
			$this->values[(string)$column] = (string)$value;
		}
		return $this;
	}

	public function set($key, $value) {
		$this->values[(string)$key] = (string)$value;
		return $this;
	}

	public function where(...$predicates) {
		$this->where = array_map('strval', $predicates);
		return $this;
	}

	public function orderBy($sort, $order = null) {
		$this->orderBy = [self::quote($sort) . ($order === null ? '' : ' ' . strtoupper((string)$order))];
		return $this;
	}

	public function setMaxResults($maxResults) {
		$this->maxResults = $maxResults === null ? null : (int)$maxResults;
		return $this;
	}

	public function createNamedParameter($value, $type = self::PARAM_STR, $placeHolder = null): IParameter {
		$name = $placeHolder ?? 'dcValue' . (count($this->params) + 1);
		$name = ltrim((string)$name, ':');
		$this->params[$name] = [$value, (int)$type];
		return new SqlFragment(':' . $name);
	}

	public function getSQL(): string {
		$table = self::quote($this->connection->prefixed($this->table));
		$where = $this->where === [] ? '' : ' WHERE ' . implode(' AND ', $this->where);
		switch ($this->type) {
			case 'select':
				return 'SELECT ' . implode(', ', $this->selects) . ' FROM ' . $table . $where
					. ($this->orderBy === [] ? '' : ' ORDER BY ' . implode(', ', $this->orderBy))
					. ($this->maxResults === null ? '' : ' LIMIT ' . $this->maxResults);
			case 'insert':
				return 'INSERT INTO ' . $table . ' (' . implode(', ', array_map([self::class, 'quote'], array_keys($this->values)))
					. ') VALUES (' . implode(', ', $this->values) . ')';
			case 'update':
				$sets = [];
				foreach ($this->values as $column => $value) {
					$sets[] = self::quote($column) . ' = ' . $value;
				}
				return 'UPDATE ' . $table . ' SET ' . implode(', ', $sets) . $where;
			case 'delete':
				return 'DELETE FROM ' . $table . $where;
		}
		throw new \LogicException('empty query');
	}

	public function executeQuery(?IDBConnection $connection = null): IResult {
		if ($this->type !== 'select') {
			throw new \RuntimeException('Invalid query type, expected SELECT query');
		}
		return new PdoResult($this->run());
	}

	public function executeStatement(?IDBConnection $connection = null): int {
		if ($this->type === 'select') {
			throw new \RuntimeException('Invalid query type, expected INSERT, DELETE or UPDATE statement');
		}
		$statement = $this->run();
		if ($this->type === 'insert') {
			$this->insertRan = true;
		}
		return $statement->rowCount();
	}

	public function getLastInsertId(): int {
		if (!$this->insertRan) {
			throw new \BadMethodCallException('Invalid call to getLastInsertId without using insert() before.');
		}
		return (int)$this->connection->pdo()->lastInsertId();
	}

	/** Quotes an identifier (or alias.identifier); parameters, functions and "*" pass through. */
	public static function quote(mixed $identifier): string {
		if ($identifier instanceof IParameter || $identifier instanceof IQueryFunction) {
			return (string)$identifier;
		}
		$identifier = (string)$identifier;
		if ($identifier === '*' || !preg_match('/^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$/', $identifier)) {
			return $identifier;
		}
		return implode('.', array_map(static fn (string $part): string => '"' . $part . '"', explode('.', $identifier)));
	}

	private function run(): \PDOStatement {
		$statement = $this->connection->pdo()->prepare($this->getSQL());
		foreach ($this->params as $name => [$value, $type]) {
			$pdoType = match ($type) {
				self::PARAM_NULL => PDO::PARAM_NULL,
				self::PARAM_INT => PDO::PARAM_INT,
				self::PARAM_LOB => PDO::PARAM_LOB,
				default => PDO::PARAM_STR,
			};
			if ($value === null) {
				$pdoType = PDO::PARAM_NULL;
			}
			$statement->bindValue(':' . $name, $value, $pdoType);
		}
		$statement->execute();
		return $statement;
	}
}
