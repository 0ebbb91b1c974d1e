<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: the part of Doctrine DBAL 3 Schema\Table/Column that migrations call. It only
 * records the definition; tests turn it into SQLite DDL (Tests\Support\SqliteSchema).
 */

namespace Doctrine\DBAL\Schema;

class Table {
	/** @var array<string, Column> */
	private array $columns = [];
	/** @var list<string> */
	private array $primaryKey = [];
	/** @var array<string, array{columns: list<string>, unique: bool}> */
	private array $indexes = [];

	public function __construct(
		private string $name,
	) {
	}

	public function getName(): string {
		return $this->name;
	}

	/** @param array<string, mixed> $options */
	public function addColumn($name, $typeName, array $options = []) {
		if (isset($this->columns[$name])) {
			throw new \LogicException('column ' . $name . ' already exists');
		}
		$allowed = ['notnull', 'default', 'autoincrement', 'length', 'unsigned', 'precision', 'scale', 'fixed', 'comment'];
		foreach (array_keys($options) as $option) {
			if (!in_array($option, $allowed, true)) {
				throw new \LogicException('unknown column option ' . $option);
			}
		}
		return $this->columns[$name] = new Column($name, $typeName, $options);
	}

	public function hasColumn($name) {
		return isset($this->columns[$name]);
	}

	/** @return list<Column> */
	public function getColumns() {
		return array_values($this->columns);
	}

	public function setPrimaryKey(array $columnNames, $indexName = false) {
		$this->primaryKey = array_values($columnNames);
		return $this;
	}

	/** @return list<string> */
	public function getPrimaryKeyColumnNames(): array {
		return $this->primaryKey;
	}

	public function addIndex(array $columnNames, $indexName = null, array $flags = [], array $options = []) {
		$this->indexes[(string)$indexName] = ['columns' => array_values($columnNames), 'unique' => false];
		return $this;
	}

	public function addUniqueIndex(array $columnNames, $indexName = null, array $options = []) {
		$this->indexes[(string)$indexName] = ['columns' => array_values($columnNames), 'unique' => true];
		return $this;
	}

	/** @return array<string, array{columns: list<string>, unique: bool}> */
	public function getIndexDefinitions(): array {
		return $this->indexes;
	}
}
