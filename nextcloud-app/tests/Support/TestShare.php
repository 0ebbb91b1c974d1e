<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\Files\Node;
use OCP\Share\IShare;

/** A share as Nextcloud's Share20\Share holds it: plain properties. */
final class TestShare implements IShare {
	/** Set by TestShareManager::createShare. */
	public ?string $id = null;
	private ?Node $node = null;
	private ?int $shareType = null;
	private ?string $sharedWith = null;
	private ?int $permissions = null;
	private string $note = '';
	private ?\DateTime $expires = null;
	private ?string $label = null;
	private ?string $sharedBy = null;
	private ?string $shareOwner = null;
	private ?string $password = null;
	private ?string $token = null;

	public function getId() {
		return $this->id;
	}

	public function setNode(Node $node) {
		$this->node = $node;
		return $this;
	}

	public function getNode() {
		return $this->node;
	}

	public function setShareType($shareType) {
		$this->shareType = $shareType;
		return $this;
	}

	public function getShareType() {
		return $this->shareType;
	}

	public function setSharedWith($sharedWith) {
		$this->sharedWith = $sharedWith;
		return $this;
	}

	public function getSharedWith() {
		return $this->sharedWith;
	}

	public function setPermissions($permissions) {
		$this->permissions = $permissions;
		return $this;
	}

	public function getPermissions() {
		return $this->permissions;
	}

	public function setNote($note) {
		$this->note = $note;
		return $this;
	}

	public function getNote() {
		return $this->note;
	}

	public function setExpirationDate(?\DateTime $expireDate) {
		$this->expires = $expireDate;
		return $this;
	}

	public function getExpirationDate() {
		return $this->expires;
	}

	public function setLabel($label) {
		$this->label = $label;
		return $this;
	}

	public function getLabel() {
		return $this->label;
	}

	public function setSharedBy($sharedBy) {
		$this->sharedBy = $sharedBy;
		return $this;
	}

	public function getSharedBy() {
		return $this->sharedBy;
	}

	public function setShareOwner($shareOwner) {
		$this->shareOwner = $shareOwner;
		return $this;
	}

	public function getShareOwner() {
		return $this->shareOwner;
	}

	public function setPassword($password) {
		$this->password = $password;
		return $this;
	}

	public function getPassword() {
		return $this->password;
	}

	public function setToken($token) {
		$this->token = $token;
		return $this;
	}

	public function getToken() {
		return $this->token;
	}
}
