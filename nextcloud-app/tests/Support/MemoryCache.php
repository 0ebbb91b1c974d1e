<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\IMemcache;

/**
 * MemoryCache is one prefix view of a MemoryCacheFactory's store, with TTLs honoured
 * against the test's clock.
 */
final class MemoryCache implements IMemcache {
	public function __construct(
		private readonly MemoryCacheFactory $factory,
		private readonly FixedClock $clock,
		private readonly string $prefix,
	) {
	}

	public function get($key) {
		$entry = $this->factory->store[$this->prefix . '/' . $key] ?? null;
		if ($entry === null || !$this->live($entry)) {
			return null;
		}
		$this->factory->hits++;
		return $entry['value'];
	}

	public function set($key, $value, $ttl = 0) {
		$ttl = (int)$ttl > 0 ? (int)$ttl : self::DEFAULT_TTL;
		$this->factory->store[$this->prefix . '/' . $key] = ['value' => $value, 'expires' => $this->clock->getTime() + $ttl];
		return true;
	}

	public function hasKey($key) {
		$entry = $this->factory->store[$this->prefix . '/' . $key] ?? null;
		return $entry !== null && $this->live($entry);
	}

	public function remove($key) {
		unset($this->factory->store[$this->prefix . '/' . $key]);
		return true;
	}

	public function clear($prefix = '') {
		foreach (array_keys($this->factory->store) as $key) {
			if (str_starts_with($key, $this->prefix . '/' . $prefix)) {
				unset($this->factory->store[$key]);
			}
		}
		return true;
	}

	public static function isAvailable(): bool {
		return true;
	}

	public function add($key, $value, $ttl = 0) {
		if ($this->hasKey($key)) {
			return false;
		}
		return $this->set($key, $value, $ttl);
	}

	public function inc($key, int $step = 1) {
		$value = (int)($this->get($key) ?? 0) + $step;
		$this->set($key, $value);
		return $value;
	}

	public function dec($key, int $step = 1) {
		return $this->inc($key, -$step);
	}

	public function cas($key, $old, $new) {
		if ($this->get($key) !== $old) {
			return false;
		}
		return $this->set($key, $new);
	}

	public function cad($key, $old) {
		if ($this->get($key) !== $old) {
			return false;
		}
		return $this->remove($key);
	}

	/** @param array{value: mixed, expires: int} $entry */
	private function live(array $entry): bool {
		return MemoryCacheFactory::live($entry, $this->clock);
	}
}
